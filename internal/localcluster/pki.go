package localcluster

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"time"
)

// pki is a throw-away certificate authority owned by the cluster, so that a
// test can both trust the apiserver and mint identities (client certificates
// in chosen groups) or re-encrypt traffic in a proxy of its own.
type pki struct {
	caCert *x509.Certificate
	caKey  crypto.Signer
	caPEM  []byte
}

func newPKI() (*pki, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "watchprobe-localcluster-ca"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &pki{caCert: cert, caKey: key, caPEM: pemBlock("CERTIFICATE", der)}, nil
}

// issue returns a PEM certificate and key signed by the CA. A serving
// certificate gets loopback SANs; a client certificate carries user and groups
// the way kube-apiserver reads them (CN = user, O = groups).
func (p *pki) issue(commonName string, groups []string, serving bool) (certPEM, keyPEM []byte, err error) {
	if serving {
		return p.issueFor(commonName, groups, true, x509.ExtKeyUsageServerAuth)
	}
	return p.issueFor(commonName, groups, false, x509.ExtKeyUsageClientAuth)
}

// issueFor is issue with the extended key usages spelled out, for a server
// that is also a client of itself, as etcd is (see prepareEtcdTLS).
func (p *pki) issueFor(commonName string, groups []string, serving bool, usages ...x509.ExtKeyUsage) (certPEM, keyPEM []byte, err error) {
	var names subjectAltNames
	if serving {
		names = loopbackNames()
	}
	return p.issueNamed(commonName, groups, names, usages...)
}

// subjectAltNames are the names a serving certificate is valid for.
type subjectAltNames struct {
	dns []string
	ips []net.IP
}

func loopbackNames() subjectAltNames {
	return subjectAltNames{dns: []string{"localhost"}, ips: []net.IP{net.ParseIP("127.0.0.1"), net.IPv6loopback}}
}

// issueNamed returns a certificate for a fresh key, valid for names.
func (p *pki) issueNamed(commonName string, groups []string, names subjectAltNames, usages ...x509.ExtKeyUsage) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	if certPEM, err = p.sign(key, commonName, groups, names, usages...); err != nil {
		return nil, nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return certPEM, pemBlock("EC PRIVATE KEY", keyDER), nil
}

// sign returns a certificate for an existing key, so a server that reloads
// its certificate on each handshake (etcd does) can be given more names
// without its key file changing under it.
func (p *pki) sign(key *ecdsa.PrivateKey, commonName string, groups []string, names subjectAltNames, usages ...x509.ExtKeyUsage) ([]byte, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: commonName, Organization: groups},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  usages,
		DNSNames:     names.dns,
		IPAddresses:  names.ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, key.Public(), p.caKey)
	if err != nil {
		return nil, err
	}
	return pemBlock("CERTIFICATE", der), nil
}

// IssueServing returns a serving certificate for the loopback addresses,
// signed by the cluster CA, for a test proxy that sits in front of the
// apiserver and must be trusted by the same clients.
func (c *Cluster) IssueServing() (certPEM, keyPEM []byte, err error) {
	return c.pki.issue("localhost", nil, true)
}

// writeServiceAccountKey writes the key pair the apiserver signs and verifies
// ServiceAccount tokens with.
func writeServiceAccountKey(pubPath, keyPath string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return err
	}
	if err := os.WriteFile(keyPath, pemBlock("EC PRIVATE KEY", keyDER), 0o600); err != nil {
		return err
	}
	return os.WriteFile(pubPath, pemBlock("PUBLIC KEY", pubDER), 0o600)
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

func writeFiles(files map[string][]byte) error {
	for path, data := range files {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return fmt.Errorf("writing %s: %w", path, err)
		}
	}
	return nil
}
