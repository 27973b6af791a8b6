package egress

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"
)

// ErrBadCredential is wrapped by every error ParseCredential returns.
var ErrBadCredential = errors.New("bad egress credential")

// caValidity is how long the per-session CA and its leaves are valid. The key
// never leaves this process's memory, so the validity only has to outlast a
// session.
const caValidity = 7 * 24 * time.Hour

// Credential is one --credential: the proxy adds Header: <value> to requests to
// Host. The value is read on the host when the credential is parsed; it is kept
// unexported and String, GoString and JSON never show it.
type Credential struct {
	Host   string // normalized host name
	Header string // canonical header name
	Var    string // the environment variable the value was read from
	value  string
}

// String gives the credential as it was written, HOST=HEADER:env:VAR: never the value.
func (c Credential) String() string { return c.Host + "=" + c.Header + ":env:" + c.Var }

// GoString keeps %#v from printing the value.
func (c Credential) GoString() string { return "egress.Credential{" + c.String() + "}" }

// headers a credential may not set: they frame the request or belong to one hop.
var reservedHeaders = map[string]bool{
	"Host": true, "Content-Length": true, "Transfer-Encoding": true, "Connection": true,
	"Keep-Alive": true, "Proxy-Connection": true, "Te": true, "Trailer": true, "Upgrade": true,
	"Proxy-Authorization": true, "Proxy-Authenticate": true,
}

// ParseCredential parses HOST=HEADER:env:VAR and reads VAR with getenv now. HOST
// is a host name (no port, no wildcard). A missing or empty variable, or a value
// that cannot be a header value, is an error (which never shows the value).
// Errors wrap ErrBadCredential.
func ParseCredential(s string, getenv func(string) string) (Credential, error) {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w %q: %s; want HOST=HEADER:env:VAR, like api.github.com=Authorization:env:GITHUB_AUTH",
			ErrBadCredential, s, fmt.Sprintf(format, a...))
	}
	host, rest, ok := strings.Cut(s, "=")
	if !ok {
		return Credential{}, bad("no '='")
	}
	if strings.ContainsAny(host, ":*/[") || isIPLiteral(host) {
		return Credential{}, bad("HOST must be a plain host name (no port, wildcard or IP address)")
	}
	name, err := normalizeName(host)
	if err != nil {
		return Credential{}, bad("%s", err.Error())
	}
	header, v, ok := strings.Cut(rest, ":")
	if !ok {
		return Credential{}, bad("no ':' after the header name")
	}
	if !httpguts.ValidHeaderFieldName(header) {
		return Credential{}, bad("%q is not a valid header name", header)
	}
	header = http.CanonicalHeaderKey(header)
	if reservedHeaders[header] {
		return Credential{}, bad("the %s header cannot carry a credential", header)
	}
	varName, ok := strings.CutPrefix(v, "env:")
	if !ok {
		return Credential{}, bad("the value must come from the environment: env:VAR")
	}
	if !validEnvName(varName) {
		return Credential{}, bad("%q is not an environment variable name", varName)
	}
	value := getenv(varName)
	if value == "" {
		return Credential{}, bad("the environment variable %s is unset or empty on the host: export it before opening the session", varName)
	}
	if !httpguts.ValidHeaderFieldValue(value) || strings.TrimSpace(value) != value {
		return Credential{}, bad("the value of %s cannot be sent as a header value (control characters, or leading/trailing space)", varName)
	}
	return Credential{Host: name, Header: header, Var: varName, value: value}, nil
}

func validEnvName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// sessionCA is the per-session certificate authority and the leaf certificates
// it signed, one per credential host, made once at New (the set of hosts is fixed).
type sessionCA struct {
	certPEM []byte
	leaves  map[string]*tls.Certificate
}

// newSessionCA makes an ECDSA P-256 CA valid for caValidity and name-constrained
// to hosts, and a leaf for each host. Keys stay in memory.
func newSessionCA(session string, hosts []string) (*sessionCA, error) {
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	_, all4, _ := net.ParseCIDR("0.0.0.0/0")
	_, all6, _ := net.ParseCIDR("::/0")
	cn := "sandbash egress CA"
	if session != "" {
		cn += " (session " + session + ")"
	}
	tmpl := &x509.Certificate{
		SerialNumber:                serial(),
		Subject:                     pkix.Name{Organization: []string{"sandbash"}, CommonName: cn},
		NotBefore:                   now.Add(-time.Hour),
		NotAfter:                    now.Add(caValidity),
		KeyUsage:                    x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid:       true,
		IsCA:                        true,
		MaxPathLenZero:              true,
		PermittedDNSDomainsCritical: true,
		PermittedDNSDomains:         hosts,
		ExcludedIPRanges:            []*net.IPNet{all4, all6},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	caCert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	ca := &sessionCA{
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		leaves:  make(map[string]*tls.Certificate, len(hosts)),
	}
	for _, h := range hosts {
		lt := &x509.Certificate{
			SerialNumber: serial(),
			Subject:      pkix.Name{CommonName: h},
			DNSNames:     []string{h},
			NotBefore:    now.Add(-time.Hour),
			NotAfter:     caCert.NotAfter,
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		}
		ld, err := x509.CreateCertificate(rand.Reader, lt, caCert, &leafKey.PublicKey, caKey)
		if err != nil {
			return nil, err
		}
		leaf, err := x509.ParseCertificate(ld)
		if err != nil {
			return nil, err
		}
		ca.leaves[h] = &tls.Certificate{Certificate: [][]byte{ld, der}, PrivateKey: leafKey, Leaf: leaf}
	}
	return ca, nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return n.Add(n, big.NewInt(1))
}
