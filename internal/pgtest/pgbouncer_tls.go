package pgtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"path/filepath"
	"time"
)

// WithClientTLS lets PgBouncer's clients use TLS (client_tls_sslmode = allow, with a
// self-signed certificate made for the test): a client with sslmode=require talks TLS to
// PgBouncer, cancel requests too. The default is no TLS.
func WithClientTLS() PgBouncerOption {
	return func(s *pgbouncerSettings) { s.clientTLS = true }
}

// tlsFiles returns the certificate and key files WithClientTLS needs, by name in b.dir;
// none without it. The map is the caller's to add to.
func (b *PgBouncer) tlsFiles() (map[string]string, error) {
	if !b.set.clientTLS {
		return map[string]string{}, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "localhost"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		DNSNames: []string{"localhost"}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	return map[string]string{
		"client.crt": string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
		"client.key": string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})),
	}, nil
}

// tlsLines are pgbouncer.ini's lines for WithClientTLS.
func (b *PgBouncer) tlsLines() string {
	if !b.set.clientTLS {
		return ""
	}
	return fmt.Sprintf("client_tls_sslmode = allow\nclient_tls_cert_file = %s\nclient_tls_key_file = %s\n",
		filepath.Join(b.dir, "client.crt"), filepath.Join(b.dir, "client.key"))
}
