package backendtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"math/big"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandbash/sandbash/internal/netns"
)

// testHost is a host the network tests reach: a network namespace of its
// own, joined to the host's by a veth pair on a private /30, with an HTTP
// server on port 80 and an HTTPS server on port 443 at Addr. Test traffic
// goes nowhere else. The servers run in this test process, on listeners
// made in the test host's namespace (package internal/netns).
type testHost struct {
	Addr    string // the test host's address, 10.213.N.2
	Gateway string // the host's side of the veth, 10.213.N.1
	CAPEM   []byte // the CA of the HTTPS server's certificate, which no system trusts
	name    string
	ns      *os.File
	servers []*httptest.Server

	mu   sync.Mutex
	seen []*http.Request // requests the servers received
}

// newTestHost makes a test host, removed when t ends. It needs root.
func newTestHost(t *testing.T) *testHost {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("the network tests make a test host in a network namespace, which needs root")
	}
	h := &testHost{}
	// `ip netns add` sets up /run/netns on first use, and two test
	// processes doing that at once can leave one with a path that is no
	// longer its namespace: one at a time, across processes.
	lock, err := os.OpenFile("/run/sandbash-testnet.lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	for range 20 {
		n := mrand.IntN(250) + 1
		h.name = fmt.Sprintf("sbt%d-%d", os.Getpid(), n)
		h.Gateway, h.Addr = fmt.Sprintf("10.213.%d.1", n), fmt.Sprintf("10.213.%d.2", n)
		if err = h.setUp(); err == nil {
			break
		}
		h.tearDown()
	}
	if err != nil {
		t.Fatalf("making a test host: %v", err)
	}
	t.Cleanup(h.tearDown)
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		h.seen = append(h.seen, r)
		h.mu.Unlock()
		auth := "absent"
		if r.Header.Get(testTokenHeader) != "" {
			auth = "present" // never the value: the sandbox must not learn it
		}
		fmt.Fprintf(w, "test host %s %s auth=%s\n", r.Host, r.URL.Path, auth)
	})
	for _, port := range []string{"80", "443"} {
		l, err := netns.Listen(h.ns, net.JoinHostPort(h.Addr, port))
		if err != nil {
			t.Fatalf("test host: listening on port %s: %v", port, err)
		}
		// The probes drop connections mid-handshake on purpose: no log.
		srv := &httptest.Server{Listener: l, Config: &http.Server{Handler: handler, ErrorLog: log.New(io.Discard, "", 0)}}
		if port == "443" {
			cert, caPEM, err := testCert(h.Addr, "web.test", "other.test")
			if err != nil {
				t.Fatal(err)
			}
			srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
			srv.StartTLS()
			h.CAPEM = caPEM
		} else {
			srv.Start()
		}
		h.servers = append(h.servers, srv)
	}
	return h
}

// testCert makes a CA and a certificate it signs for names and ip, and
// returns the certificate and the CA's, as PEM.
func testCert(ip string, names ...string) (tls.Certificate, []byte, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	now := time.Now()
	ca := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "sandbash test host CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	leaf := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: names[0]},
		DNSNames: names, IPAddresses: []net.IP{net.ParseIP(ip)},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key},
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), nil
}

func (h *testHost) setUp() error {
	steps := [][]string{
		{"netns", "add", h.name},
		{"link", "add", h.name + "h", "type", "veth", "peer", "name", h.name + "n"},
		{"link", "set", h.name + "n", "netns", h.name},
		{"addr", "add", h.Gateway + "/30", "dev", h.name + "h"},
		{"link", "set", h.name + "h", "up"},
		{"-n", h.name, "addr", "add", h.Addr + "/30", "dev", h.name + "n"},
		{"-n", h.name, "link", "set", h.name + "n", "up"},
		{"-n", h.name, "link", "set", "lo", "up"},
		{"-n", h.name, "route", "add", "default", "via", h.Gateway},
	}
	for _, s := range steps {
		if out, err := exec.Command("ip", s...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %v: %s", strings.Join(s, " "), err, out)
		}
	}
	var err error
	h.ns, err = os.Open("/run/netns/" + h.name)
	return err
}

func (h *testHost) tearDown() {
	for _, s := range h.servers {
		s.Close()
	}
	if h.ns != nil {
		h.ns.Close()
	}
	// Deleting the namespace deletes the veth pair with it.
	_ = exec.Command("ip", "netns", "del", h.name).Run()
	_ = exec.Command("ip", "link", "del", h.name+"h").Run()
}

// testTokenHeader is the header the credential tests have the proxy add.
const testTokenHeader = "X-Test-Token"

// received returns the requests the servers received for host.
func (h *testHost) received(host string) []*http.Request {
	h.mu.Lock()
	defer h.mu.Unlock()
	var rs []*http.Request
	for _, r := range h.seen {
		if r.Host == host || strings.HasPrefix(r.Host, host+":") {
			rs = append(rs, r)
		}
	}
	return rs
}
