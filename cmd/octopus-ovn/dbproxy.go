package main

import (
	"crypto/tls"
	"errors"
	"fmt"

	"github.com/spf13/cobra"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/octopus-mcs/octopus/internal/datapath/ovn/dbproxy"
	"github.com/octopus-mcs/octopus/internal/pki"
)

// newDBProxyCommand is `octopus-ovn db-proxy`: the member's ovn-ic pod reaches its own
// cluster's OVN databases through it (internal/datapath/ovn/dbproxy says why).
func newDBProxyCommand() *cobra.Command {
	var routes []string
	var key, cert, ca string
	cmd := &cobra.Command{
		Use:   "db-proxy",
		Short: "Carry OVSDB connections from unix sockets to TLS database ports with this pod's certificate",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var rs []dbproxy.Route
			var errs []error
			for _, s := range routes {
				r, err := dbproxy.ParseRoute(s)
				errs = append(errs, err)
				rs = append(rs, r)
			}
			if key == "" || cert == "" || ca == "" {
				errs = append(errs, errors.New("--private-key, --certificate and --ca-cert are required (the databases refuse clients without a certificate)"))
			}
			if err := errors.Join(errs...); err != nil {
				return err
			}
			configs := map[string]*tls.Config{}
			for _, r := range rs {
				c, err := pki.ClientConfig(cert, key, ca, r.Host())
				if err != nil {
					return fmt.Errorf("--certificate: %w", err)
				}
				configs[r.Remote] = c
			}
			return dbproxy.Serve(ctrl.SetupSignalHandler(), rs, func(r dbproxy.Route) *tls.Config { return configs[r.Remote] }, ctrl.Log.WithName("db-proxy"))
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&routes, "route", nil, "unix:PATH=ssl:HOST:PORT: listen on PATH, carry each connection to HOST:PORT over TLS (repeatable)")
	f.StringVar(&key, "private-key", "", "PEM private key of this pod's client certificate")
	f.StringVar(&cert, "certificate", "", "PEM client certificate this pod presents to the databases")
	f.StringVar(&ca, "ca-cert", "", "PEM certificate of the CA that signed the databases' certificate")
	_ = cmd.MarkFlagRequired("route")
	return cmd
}
