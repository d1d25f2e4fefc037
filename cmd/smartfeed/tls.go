package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"google.golang.org/grpc/credentials"
)

// certReloader serves the certificate in a pair of PEM files, reloading it when either file
// changes (checked at most once a second), so a rotated certificate is used without a restart.
type certReloader struct {
	certFile, keyFile string

	mu      sync.Mutex
	cert    *tls.Certificate
	certMod time.Time
	keyMod  time.Time
	checked time.Time
}

func newCertReloader(certFile, keyFile string) (*certReloader, error) {
	r := &certReloader{certFile: certFile, keyFile: keyFile}
	if err := r.reload(true); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *certReloader) reload(force bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	if !force && now.Sub(r.checked) < time.Second {
		return nil
	}
	r.checked = now
	cs, err := os.Stat(r.certFile)
	if err != nil {
		return fmt.Errorf("tls certificate: %w", err)
	}
	ks, err := os.Stat(r.keyFile)
	if err != nil {
		return fmt.Errorf("tls key: %w", err)
	}
	if !force && cs.ModTime().Equal(r.certMod) && ks.ModTime().Equal(r.keyMod) {
		return nil
	}
	c, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		// Half-written during a rotation, say: keep serving the last good pair.
		if r.cert == nil {
			return fmt.Errorf("tls key pair: %w", err)
		}
		return nil
	}
	r.cert, r.certMod, r.keyMod = &c, cs.ModTime(), ks.ModTime()
	return nil
}

func (r *certReloader) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	_ = r.reload(false)
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cert, nil
}

func (r *certReloader) getClient(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	return r.get(nil)
}

// serverTLS returns the TLS config of the listeners (nil when no certificate is configured):
// TLS 1.2 at least; with a client CA file, clients must present a certificate it signed (mTLS
// between roles).
func (a *app) serverTLS() (*tls.Config, error) {
	if a.tlsCfg != nil {
		return a.tlsCfg, nil // built once, shared by the three listeners
	}
	c := a.cfg.TLS
	if c.CertFile == "" && c.KeyFile == "" {
		if c.ClientCAFile != "" {
			return nil, errors.New("tls: a client CA file without a certificate and key")
		}
		return nil, nil
	}
	if c.CertFile == "" || c.KeyFile == "" {
		return nil, errors.New("tls: both --tls-cert-file and --tls-key-file are needed")
	}
	if a.certs == nil {
		r, err := newCertReloader(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, err
		}
		a.certs = r
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: a.certs.get}
	if c.ClientCAFile != "" {
		pool, err := loadPool(c.ClientCAFile)
		if err != nil {
			return nil, err
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	a.tlsCfg = cfg
	return cfg, nil
}

// generatorCreds are the transport credentials a feedsvc process dials its generator with:
// TLS verified against --generator-ca-file, presenting this process's own certificate when it
// has one (the generator may require it); nil means plaintext.
func (a *app) generatorCreds() (credentials.TransportCredentials, error) {
	ca := a.cfg.Generator.CAFile
	if ca == "" {
		return nil, nil
	}
	pool, err := loadPool(ca)
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool}
	if a.cfg.TLS.CertFile != "" {
		if a.certs == nil {
			if a.certs, err = newCertReloader(a.cfg.TLS.CertFile, a.cfg.TLS.KeyFile); err != nil {
				return nil, err
			}
		}
		cfg.GetClientCertificate = a.certs.getClient
	}
	return credentials.NewTLS(cfg), nil
}

func loadPool(path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tls CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("tls CA file %s: no PEM certificate", path)
	}
	return pool, nil
}
