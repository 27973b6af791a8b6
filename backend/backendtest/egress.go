package backendtest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/sandbash/sandbash"
)

// The egress tests run calls against a test host (testnet.go) under an
// egress policy. Names are pinned for the proxy (Egress.Resolve), so no
// DNS is asked and no traffic leaves the machine.

// egressToken is the credential the proxy adds; Run puts it in the
// environment as egressTokenVar.
const (
	egressToken    = "sandbash-suite-egress-secret-4c1d"
	egressTokenVar = "SANDBASH_SUITE_EGRESS_TOKEN"
)

// syncBuffer is a log the proxy writes to while the test reads it.
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

// httpVia is a command that sends one HTTP request for url through the
// proxy, as a client configured with HTTP_PROXY does, and prints the
// response: bash's /dev/tcp, so it needs no client in the image.
func httpVia(method, target, host string) string {
	return fmt.Sprintf(`exec 3<>/dev/tcp/127.0.0.1/3128 && printf '%s %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n' >&3 && timeout 10 cat <&3`, method, target, host)
}

// socksVia is a command that asks the proxy over SOCKS5 for host:port (by
// name, as socks5h clients do), prints the reply code as two hex digits,
// and on success sends an HTTP GET and prints the response.
func socksVia(host string, port int) string {
	var name strings.Builder
	for _, c := range []byte(host) {
		fmt.Fprintf(&name, `\x%02x`, c)
	}
	return fmt.Sprintf(`exec 3<>/dev/tcp/127.0.0.1/3128 && printf '\x05\x01\x00' >&3 && head -c 2 <&3 >/dev/null &&
printf '\x05\x01\x00\x03\x%02x%s\x%02x\x%02x' >&3 && rep=$(head -c 10 <&3 | od -An -tx1 | tr -d ' \n') && echo "reply ${rep:2:2}" &&
if [ "${rep:2:2}" = 00 ]; then printf 'GET /socks HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n' >&3; timeout 10 cat <&3; fi`,
		len(host), name.String(), port>>8, port&0xff, host)
}

// testEgressPolicy: with allow rules the sandbox has no route but the
// proxy. What a rule allows goes through over HTTP, CONNECT and SOCKS5;
// everything else is denied with a message that names the destination and
// the flag that would allow it, and the call's result lists it. Direct TCP
// and UDP fail. Metadata addresses are denied (a rule or pin naming them
// is refused: testEgressRefusals).
func testEgressPolicy(f *fixture) {
	if asUser() {
		f.refusedAsUser(sandbash.Config{Egress: &sandbash.Egress{Allow: []string{"web.test"}}}, "egress", "network namespace")
		return
	}
	if f.refused(f.caps.Refuses.Egress, sandbash.Config{Egress: &sandbash.Egress{Allow: []string{"web.test"}}}) {
		return
	}
	host := newTestHost(f.t)
	var log syncBuffer
	s := f.open(sandbash.Config{Egress: &sandbash.Egress{
		Allow:   []string{"web.test"},
		Resolve: []string{"web.test=" + host.Addr, "other.test=" + host.Addr},
		Log:     &log,
	}})
	// The proxy's address is where clients look for it.
	f.expect(s, `echo "$HTTP_PROXY $https_proxy $ALL_PROXY $no_proxy"`, 0,
		"http://127.0.0.1:3128 http://127.0.0.1:3128 socks5h://127.0.0.1:3128 localhost,127.0.0.1,::1\n")
	// No route: not to the test host, not to the host.
	for _, addr := range []string{host.Addr, host.Gateway} {
		f.expect(s, tcpProbe(addr, 80), 0, "blocked\n")
	}
	f.expect(s, fmt.Sprintf("echo x 2>/dev/null > /dev/udp/%s/53 && echo sent || echo blocked", host.Addr), 0, "blocked\n")

	type probe struct {
		cmd, want string
	}
	allowed := []probe{
		{httpVia("GET", "http://web.test/plain", "web.test"), "test host web.test /plain"},
		// The tunnel's first line is the proxy's answer; the TLS server
		// behind it waits for a handshake, so read only that line.
		{strings.Replace(httpVia("CONNECT", "web.test:443", "web.test:443"), "timeout 10 cat", "timeout 10 head -1", 1), " 200 "},
		{socksVia("web.test", 80), "reply 00"},
	}
	for _, p := range allowed {
		r := f.run(s, p.cmd)
		if !strings.Contains(r.Output, p.want) {
			f.t.Errorf("allowed: %s\ngot %q, want it to contain %q", p.cmd, r.Output, p.want)
		}
		if len(r.EgressDenied) != 0 {
			f.t.Errorf("allowed: %s: the result lists denials %q", p.cmd, r.EgressDenied)
		}
	}
	if n := len(host.received("web.test")); n < 2 {
		f.t.Errorf("the test host received %d requests for web.test through the proxy, want 2 (HTTP and SOCKS5)", n)
	}

	denied := []struct {
		probe
		dest     string
		allowing bool // a rule could allow it: the answer names --allow
	}{
		{probe{httpVia("GET", "http://other.test/", "other.test"), "403"}, "other.test:80", true},
		{probe{httpVia("CONNECT", "other.test:443", "other.test:443"), "403"}, "other.test:443", true},
		{probe{socksVia("other.test", 80), "reply 02"}, "other.test:80", false},
		{probe{httpVia("GET", "http://web.test:8080/", "web.test:8080"), "403"}, "web.test:8080", true},
		{probe{httpVia("GET", "http://169.254.169.254/latest/meta-data/", "169.254.169.254"), "403"}, "169.254.169.254:80", false},
	}
	for _, p := range denied {
		r := f.run(s, p.cmd)
		if !strings.Contains(r.Output, p.want) {
			f.t.Errorf("denied: %s\ngot %q, want it to contain %q", p.cmd, r.Output, p.want)
		}
		if p.want == "403" && !strings.Contains(r.Output, strings.TrimSuffix(p.dest, ":80")) {
			f.t.Errorf("denied: the answer %q does not name %s", r.Output, p.dest)
		}
		if p.allowing && !strings.Contains(r.Output, "--allow") {
			f.t.Errorf("denied: the answer %q does not name the flag that would allow %s", r.Output, p.dest)
		}
		if !slices.Contains(r.EgressDenied, p.dest) {
			f.t.Errorf("denied: %s: the result lists %q, want %s in it", p.cmd, r.EgressDenied, p.dest)
		}
		if !strings.Contains(r.Observation(), p.dest) {
			f.t.Errorf("denied: the observation does not name %s:\n%s", p.dest, r.Observation())
		}
	}
	if n := len(host.received("other.test")); n != 0 {
		f.t.Errorf("the test host received %d requests for other.test, which no rule allows", n)
	}

	// One JSON line per attempt, with the decision.
	decisions := map[string]int{}
	sc := bufio.NewScanner(strings.NewReader(log.String()))
	for sc.Scan() {
		var e struct {
			Host, Decision string
			Port           int
		}
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			f.t.Errorf("egress log line %q: %v", sc.Text(), err)
			continue
		}
		decisions[e.Decision]++
	}
	if decisions["allow"] < len(allowed) || decisions["deny"] < len(denied) {
		f.t.Errorf("egress log has %v decisions, want at least %d allow and %d deny:\n%s", decisions, len(allowed), len(denied), log.String())
	}
}

// testEgressCredential: the proxy adds a credential's header to requests
// for its host; the value never enters the sandbox (its environment, HOME,
// /tmp), and what calls trust to reach that host over TLS is a CA
// certificate, never a key.
func testEgressCredential(f *fixture) {
	if asUser() {
		f.refusedAsUser(sandbash.Config{Egress: &sandbash.Egress{Allow: []string{"web.test"}, Credentials: []string{"web.test=" + testTokenHeader + ":env:" + egressTokenVar}}}, "egress", "network namespace")
		return
	}
	if f.refused(f.caps.Refuses.Egress, sandbash.Config{Egress: &sandbash.Egress{Allow: []string{"web.test"}}}) {
		return
	}
	host := newTestHost(f.t)
	ws := f.dir("ws-cred")
	if err := os.WriteFile(filepath.Join(ws, "hostca.pem"), host.CAPEM, 0o644); err != nil {
		f.t.Fatal(err)
	}
	s := f.open(sandbash.Config{Workspace: ws, Image: gitImage(f), Egress: &sandbash.Egress{
		Allow:       []string{"web.test", "other.test"},
		Resolve:     []string{"web.test=" + host.Addr, "other.test=" + host.Addr},
		Credentials: []string{"web.test=" + testTokenHeader + ":env:" + egressTokenVar},
		UpstreamCAs: host.CAPEM,
	}})
	// HTTPS with a real client (curl), through HTTPS_PROXY: to the
	// credential's host the proxy terminates TLS with the session CA,
	// which the call trusts (CURL_CA_BUNDLE), and adds the header; to
	// another host it only tunnels: the client sees that host's own
	// certificate, which the session's bundle does not vouch for (curl
	// fails) and the host's CA does (curl succeeds).
	f.expect(s, "curl -sS https://web.test/tls | grep -o 'auth=.*'", 0, "auth=present\n")
	f.expect(s, "curl -sS https://other.test/tls >/dev/null 2>&1; echo $?", 0, "60\n")
	f.expect(s, "curl -sS --cacert hostca.pem https://other.test/tls | grep -o 'auth=.*'", 0, "auth=absent\n")
	f.expect(s, httpVia("GET", "http://web.test/cred", "web.test")+" | grep -o 'auth=.*'", 0, "auth=present\n")
	f.expect(s, httpVia("GET", "http://other.test/cred", "other.test")+" | grep -o 'auth=.*'", 0, "auth=absent\n")
	for _, r := range host.received("web.test") {
		if got := r.Header.Get(testTokenHeader); got != egressToken {
			f.t.Errorf("the test host got %s: %q, want the credential", testTokenHeader, got)
		}
	}
	for _, r := range host.received("other.test") {
		if got := r.Header.Get(testTokenHeader); got != "" {
			f.t.Errorf("the proxy added the credential to a request for another host: %q", got)
		}
	}
	f.expect(s, `grep -rl `+egressToken+` /proc/self/environ "$HOME" /tmp 2>/dev/null; env | grep -c `+egressTokenVar, 1, "0\n")
	f.expect(s, `grep -c 'BEGIN CERTIFICATE' "$SSL_CERT_FILE" >/dev/null && grep -c 'PRIVATE KEY' "$SSL_CERT_FILE" "$NODE_EXTRA_CA_CERTS" "$GIT_SSL_CAINFO" "$REQUESTS_CA_BUNDLE" "$CARGO_HTTP_CAINFO"`, 1,
		"/home/sandbash/.sandbash-egress-ca.pem:0\n/home/sandbash/.sandbash-egress-ca.pem:0\n/home/sandbash/.sandbash-egress-ca.pem:0\n/home/sandbash/.sandbash-egress-ca.pem:0\n/home/sandbash/.sandbash-egress-ca.pem:0\n")
}

// testEgressRefusals: a bad rule, pin or credential is refused at open,
// before anything runs; egress rules with the network on are refused.
func testEgressRefusals(f *fixture) {
	bad := []sandbash.Egress{
		{Allow: []string{"https://example.com"}},
		{Allow: []string{"a.*.com"}},
		{Allow: []string{"example.com:99999"}},
		{Allow: []string{"169.254.169.254"}},
		{Allow: []string{"meta.test"}, Resolve: []string{"meta.test=169.254.169.254"}},
		{Allow: []string{"ok.test"}, Resolve: []string{"ok.test=not-an-ip"}},
		{Allow: []string{"ok.test"}, Credentials: []string{"ok.test=X-Key:env:SANDBASH_SUITE_NO_SUCH_VAR"}},
		{Resolve: []string{"ok.test=10.0.0.1"}},
	}
	for _, e := range bad {
		if s, err := sandbash.Open(f.ctx, f.b, sandbash.Config{Workspace: f.dir("ws-bad"), Egress: &e}); err == nil {
			s.Close()
			f.t.Errorf("Open accepted the egress policy %+v", e)
		}
	}
	if s, err := sandbash.Open(f.ctx, f.b, sandbash.Config{Workspace: f.dir("ws-bad"), Network: "on", Egress: &sandbash.Egress{Allow: []string{"ok.test"}}}); err == nil {
		s.Close()
		f.t.Error("Open accepted egress rules with the network on")
	}
}

// testEgressCABundlePlanted: the CA bundle sandbash writes into HOME
// whenever the session's sandbox opens (every run of a CLI session; a
// library or MCP session after each checkpoint, restore, reset or apply)
// is written as a new file, never through what a call left at its name. A
// call that replaced it with a symlink (or a hard link) to a host file
// must not get sandbash, as root, to overwrite that file.
func testEgressCABundlePlanted(f *fixture) {
	if asUser() {
		f.refusedAsUser(sandbash.Config{WorkspaceMode: sandbash.WorkspaceOverlay, Egress: &sandbash.Egress{Allow: []string{"web.test"}}}, "egress", "network namespace")
		return
	}
	if f.refused(f.caps.Refuses.Egress, sandbash.Config{Egress: &sandbash.Egress{Allow: []string{"web.test"}}}) {
		return
	}
	victimDir := f.dir("ca-victim")
	victim := filepath.Join(victimDir, "precious")
	const precious = "not a certificate\n"
	if err := os.WriteFile(victim, []byte(precious), 0o600); err != nil {
		f.t.Fatal(err)
	}
	s := f.open(sandbash.Config{Workspace: f.dir("ws-ca-planted"), WorkspaceMode: sandbash.WorkspaceOverlay, Egress: &sandbash.Egress{
		Allow:       []string{"web.test"},
		Resolve:     []string{"web.test=10.213.0.2"},
		Credentials: []string{"web.test=" + testTokenHeader + ":env:" + egressTokenVar},
	}})
	// The call cannot see the victim: a symlink's target is only a string.
	f.expect(s, `ln -sf `+victim+` "$HOME/.sandbash-egress-ca.pem" && echo planted`, 0, "planted\n")
	// A checkpoint opens the session's sandbox again (the MCP workspace
	// tool lets the agent itself ask for one), and with it the CA bundle.
	if err := s.Checkpoint(f.ctx, "after-plant"); err != nil {
		f.t.Fatalf("Checkpoint: %v", err)
	}
	if b, err := os.ReadFile(victim); err != nil || string(b) != precious {
		f.t.Errorf("the host file a call's symlink in HOME pointed to was overwritten by the CA bundle: %q..., %v", b[:min(len(b), 40)], err)
	}
	// The calls still get the bundle.
	f.expect(s, `test -L "$SSL_CERT_FILE" && echo symlink; grep -c 'BEGIN CERTIFICATE' "$SSL_CERT_FILE" >/dev/null && echo bundle`, 0, "bundle\n")
}
