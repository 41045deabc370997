package pki

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
)

// ClientConfig is the TLS configuration of a client authenticating with the key and
// certificate in keyFile and certFile and trusting only the CA certificates in caFile, for a
// server named serverName (one of its certificate's DNS names or IPs). The files are read on
// every handshake, so a renewed Secret mounted there is used at the next connection.
func ClientConfig(certFile, keyFile, caFile, serverName string) (*tls.Config, error) {
	pool, err := loadPool(caFile)
	if err != nil {
		return nil, err
	}
	if _, err := tls.LoadX509KeyPair(certFile, keyFile); err != nil {
		return nil, fmt.Errorf("loading the client certificate %s and key %s: %w", certFile, keyFile, err)
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		RootCAs:    pool,
		ServerName: serverName,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			c, err := tls.LoadX509KeyPair(certFile, keyFile)
			if err != nil {
				return nil, fmt.Errorf("loading the client certificate %s: %w", certFile, err)
			}
			return &c, nil
		},
	}, nil
}

// ServerConfig is the TLS configuration of a server presenting certFile/keyFile that accepts
// only clients with a certificate signed by a CA in caFile.
func ServerConfig(certFile, keyFile, caFile string) (*tls.Config, error) {
	pool, err := loadPool(caFile)
	if err != nil {
		return nil, err
	}
	if _, err := tls.LoadX509KeyPair(certFile, keyFile); err != nil {
		return nil, fmt.Errorf("loading the server certificate %s and key %s: %w", certFile, keyFile, err)
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		ClientCAs:  pool,
		ClientAuth: tls.RequireAndVerifyClientCert,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			c, err := tls.LoadX509KeyPair(certFile, keyFile)
			if err != nil {
				return nil, fmt.Errorf("loading the server certificate %s: %w", certFile, err)
			}
			return &c, nil
		},
	}, nil
}

func loadPool(caFile string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("reading the CA certificates: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("no CA certificate in %s", caFile)
	}
	return pool, nil
}
