package main

import (
	"crypto/tls"
	"fmt"
	"strings"

	"github.com/spf13/pflag"

	"github.com/octopus-mcs/octopus/internal/pki"
)

// tlsFlags are a database client's certificate files, named like OVN's own options
// (--private-key, --certificate, --ca-cert) after the database's flag.
type tlsFlags struct {
	db                   string
	privateKey, cert, ca string
}

func (f *tlsFlags) register(fs *pflag.FlagSet, db string) {
	f.db = db
	fs.StringVar(&f.privateKey, db+"-private-key", "", "PEM private key of this client's certificate, with --"+db+"=ssl:HOST:PORT")
	fs.StringVar(&f.cert, db+"-certificate", "", "PEM certificate this client authenticates with to the database, with --"+db+"=ssl:HOST:PORT")
	fs.StringVar(&f.ca, db+"-ca-cert", "", "PEM certificate of the CA that signed the database's certificate, with --"+db+"=ssl:HOST:PORT")
}

// clientConfig is the TLS configuration for endpoint: nil unless it is ssl:HOST:PORT, which
// needs all three files; the server's name to check is HOST.
func (f *tlsFlags) clientConfig(endpoint string) (*tls.Config, error) {
	given := f.privateKey != "" || f.cert != "" || f.ca != ""
	hostPort, ssl := strings.CutPrefix(endpoint, "ssl:")
	if !ssl {
		if given {
			return nil, fmt.Errorf("--%s-private-key, --%s-certificate and --%s-ca-cert apply only to --%s=ssl:HOST:PORT, not %q", f.db, f.db, f.db, f.db, endpoint)
		}
		return nil, nil
	}
	if f.privateKey == "" || f.cert == "" || f.ca == "" {
		return nil, fmt.Errorf("--%s=%s: give --%s-private-key, --%s-certificate and --%s-ca-cert (the database refuses clients without a certificate)", f.db, endpoint, f.db, f.db, f.db)
	}
	i := strings.LastIndex(hostPort, ":")
	if i <= 0 {
		return nil, fmt.Errorf("--%s=%s: want ssl:HOST:PORT", f.db, endpoint)
	}
	host := strings.Trim(hostPort[:i], "[]")
	cfg, err := pki.ClientConfig(f.cert, f.privateKey, f.ca, host)
	if err != nil {
		return nil, fmt.Errorf("--%s-certificate: %w", f.db, err)
	}
	return cfg, nil
}
