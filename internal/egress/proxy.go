// Package egress is sandbash's egress proxy: an HTTP proxy (absolute-URL
// requests and CONNECT) and a SOCKS5 proxy on one listener, which let a sandbox
// reach only the destinations its session allows.
//
// Policy, in order, for every connection attempt:
//
//   - The destination host is a name or an IP literal. A name pinned with
//     --resolve uses its pin; any other name is resolved by the proxy (never by
//     the sandbox), and only if a name rule matches it (an address rule does
//     not: it allows IP literals and pinned names), so no name a call makes up
//     is looked up.
//   - Every candidate address is checked, unmapped (::ffff:a.b.c.d is a.b.c.d):
//     always-denied addresses (link-local, cloud metadata, 0.0.0.0/8, multicast,
//     ...) are refused whatever the rules; loopback, private ranges and this
//     host's own addresses need a rule naming the address or a CIDR holding it,
//     or a pinned name; any other address needs a matching rule (by name or by
//     address).
//   - The proxy dials the checked address itself, so what is checked is what is
//     connected to: a name that resolves to 127.0.0.1 is not allowed by a rule
//     for the name (DNS rebinding).
//
// A denial reaches the client as an HTTP 403 (or a SOCKS reply 0x02, "not
// allowed by ruleset") whose text names the destination and the option that
// would allow it, a JSON line in the log, and an entry in Call.Denied.
//
// With credentials, the proxy terminates TLS for the credential hosts only,
// with leaf certificates from a per-session CA whose certificate (CACertPEM) the
// sandbox trusts, and adds the header to each request; every other CONNECT is a
// blind tunnel.
package egress

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"strconv"
	"sync"
	"time"

	socks5 "github.com/things-go/go-socks5"
)

// Defaults for the Policy limits left zero.
const (
	DefaultMaxConns       = 256
	DefaultHeaderTimeout  = 10 * time.Second
	DefaultIdleTimeout    = 5 * time.Minute
	DefaultDialTimeout    = 15 * time.Second
	DefaultMaxHeaderBytes = 64 << 10
)

// ErrClosed is returned by Serve on a call or proxy that is already closed.
var ErrClosed = errors.New("egress proxy closed")

// Resolver looks up a host's addresses; *net.Resolver is one.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Policy is what a session allows, and the proxy's limits.
type Policy struct {
	Allow       []Rule
	Resolve     map[string]netip.Addr // pinned names (--resolve)
	Credentials []Credential
	Log         io.Writer // one JSON line per connection attempt; nil: none. Writes are serialised.
	Session     string    // the session id, for the log

	// Dial, when set, replaces the dialer; it is only ever given an IP:port.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Resolver, when set, replaces net.DefaultResolver.
	Resolver Resolver
	// RootCAs verifies the credential hosts' certificates; nil: the system roots.
	RootCAs *x509.CertPool

	MaxConns       int           // client connections open at once, over all calls; more are refused (503, SOCKS failure)
	HeaderTimeout  time.Duration // to send the request headers, SOCKS handshake or TLS handshake
	IdleTimeout    time.Duration // a connection with no traffic either way this long is closed
	DialTimeout    time.Duration // to connect to a destination
	MaxHeaderBytes int           // request header size limit
}

// Proxy is one session's egress proxy. Its calls share the policy, the
// connection limit and the log.
type Proxy struct {
	pol      Policy
	rules    []Rule
	pins     map[string]netip.Addr
	creds    map[string]*Credential
	ca       *sessionCA
	own      map[netip.Addr]bool // this host's interface addresses, taken at New
	resolver Resolver
	dial     func(ctx context.Context, network, addr string) (net.Conn, error)

	slots    chan struct{} // one per open client connection
	overflow chan struct{} // refusals being written when over the limit

	logMu sync.Mutex

	mu     sync.Mutex
	closed bool
	calls  map[*Call]struct{}
}

// New validates the policy and, when there are credentials, makes the
// per-session CA (ECDSA P-256, short validity, in memory only).
func New(p Policy) (*Proxy, error) {
	if p.MaxConns <= 0 {
		p.MaxConns = DefaultMaxConns
	}
	if p.HeaderTimeout <= 0 {
		p.HeaderTimeout = DefaultHeaderTimeout
	}
	if p.IdleTimeout <= 0 {
		p.IdleTimeout = DefaultIdleTimeout
	}
	if p.DialTimeout <= 0 {
		p.DialTimeout = DefaultDialTimeout
	}
	if p.MaxHeaderBytes <= 0 {
		p.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	px := &Proxy{
		pol:      p,
		pins:     make(map[string]netip.Addr, len(p.Resolve)),
		creds:    make(map[string]*Credential, len(p.Credentials)),
		own:      make(map[netip.Addr]bool),
		resolver: p.Resolver,
		dial:     p.Dial,
		slots:    make(chan struct{}, p.MaxConns),
		overflow: make(chan struct{}, 16),
		calls:    make(map[*Call]struct{}),
	}
	for i, r := range p.Allow {
		if !r.valid {
			return nil, fmt.Errorf("%w: rule %d is the zero Rule: make rules with ParseRule", ErrBadRule, i)
		}
		px.rules = append(px.rules, r)
	}
	for name, ip := range p.Resolve {
		n, a, err := ParseResolve(name + "=" + ip.String())
		if err != nil {
			return nil, err
		}
		px.pins[n] = a
	}
	var hosts []string
	for i := range p.Credentials {
		c := p.Credentials[i]
		if c.value == "" {
			return nil, fmt.Errorf("%w %s: it has no value: make credentials with ParseCredential", ErrBadCredential, c)
		}
		if _, dup := px.creds[c.Host]; dup {
			return nil, fmt.Errorf("%w %s: a second credential for %s (one per host)", ErrBadCredential, c, c.Host)
		}
		if !px.nameAllowed(c.Host, 443) && !px.nameAllowed(c.Host, 80) {
			return nil, fmt.Errorf("%w %s: no allow rule lets requests reach %s, so the credential would never be sent: allow %s too",
				ErrBadCredential, c, c.Host, c.Host)
		}
		px.creds[c.Host] = &c
		hosts = append(hosts, c.Host)
	}
	if len(hosts) > 0 {
		ca, err := newSessionCA(p.Session, hosts)
		if err != nil {
			return nil, fmt.Errorf("egress: make the session CA: %w", err)
		}
		px.ca = ca
	}
	if px.resolver == nil {
		px.resolver = net.DefaultResolver
	}
	if px.dial == nil {
		d := &net.Dialer{Timeout: p.DialTimeout}
		px.dial = d.DialContext
	}
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok {
				if ip, ok := netip.AddrFromSlice(n.IP); ok {
					px.own[ip.Unmap()] = true
				}
			}
		}
	}
	return px, nil
}

func (p *Proxy) nameAllowed(host string, port int) bool {
	for _, r := range p.rules {
		if r.matchName(host, port) {
			return true
		}
	}
	return false
}

// CACertPEM is the session CA's certificate in PEM, for the sandbox to trust
// (nil without credentials). Never the key.
func (p *Proxy) CACertPEM() []byte {
	if p.ca == nil {
		return nil
	}
	return append([]byte(nil), p.ca.certPEM...)
}

// Call makes the proxy for one call: it serves that call's listeners, and
// collects its log lines and denials. On a closed Proxy the Call is closed too.
func (p *Proxy) Call(id string) *Call {
	c := newCall(p, id)
	p.mu.Lock()
	closed := p.closed
	if !closed {
		p.calls[c] = struct{}{}
	}
	p.mu.Unlock()
	if closed {
		c.Close()
	}
	return c
}

// Close ends every call: listeners, connections and goroutines. Idempotent.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	calls := make([]*Call, 0, len(p.calls))
	for c := range p.calls {
		calls = append(calls, c)
	}
	p.mu.Unlock()
	for _, c := range calls {
		c.Close()
	}
	return nil
}

func (p *Proxy) forget(c *Call) {
	p.mu.Lock()
	delete(p.calls, c)
	p.mu.Unlock()
}

// classify is classifyStatic plus this host's own addresses (private).
func (p *Proxy) classify(ip netip.Addr) (addrClass, string) {
	class, why := classifyStatic(ip)
	if class == classPublic && p.own[ip] {
		return classPrivate, "an address of this host"
	}
	return class, why
}

// logEntry is one line of the egress log.
type logEntry struct {
	Time       string `json:"time"`
	Session    string `json:"session"`
	Call       string `json:"call"`
	Proto      string `json:"proto"` // http, connect, socks5
	Host       string `json:"host"`
	Port       int    `json:"port"`
	IP         string `json:"ip"`
	Decision   string `json:"decision"` // allow, deny
	Rule       string `json:"rule"`     // the matching rule, or why it was denied
	BytesUp    int64  `json:"bytes_up"`
	BytesDown  int64  `json:"bytes_down"`
	Credential string `json:"credential,omitempty"` // the header name added, never its value
	Error      string `json:"error,omitempty"`
}

func (p *Proxy) writeLog(e *logEntry) {
	if p.pol.Log == nil {
		return
	}
	e.Time = time.Now().UTC().Format(time.RFC3339Nano)
	e.Session = p.pol.Session
	b, err := json.Marshal(e)
	if err != nil {
		return
	}
	b = append(b, '\n')
	p.logMu.Lock()
	defer p.logMu.Unlock()
	_, _ = p.pol.Log.Write(b)
}

// Call is the proxy for one call.
type Call struct {
	p      *Proxy
	id     string
	ctx    context.Context
	cancel context.CancelFunc

	srv    *http.Server  // HTTP proxy requests and MITM'd TLS connections
	httpLn *chanListener // feeds srv
	tr     *http.Transport
	rp     *httputil.ReverseProxy
	socks  *socks5.Server

	mu        sync.Mutex
	closed    bool
	listeners map[net.Listener]struct{}
	conns     map[io.Closer]struct{} // every open client and upstream connection
	denied    []string
	deniedSet map[string]bool

	wg        sync.WaitGroup // our goroutines
	httpConns sync.WaitGroup // connections srv serves
	srvDone   chan struct{}
	closeOnce sync.Once
}

// enter registers a goroutine about to run for the call; false once closed.
func (c *Call) enter() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.wg.Add(1)
	return true
}

// goFunc runs f in a goroutine Close waits for; false (f not run) once closed.
func (c *Call) goFunc(f func()) bool {
	if !c.enter() {
		return false
	}
	go func() {
		defer c.wg.Done()
		f()
	}()
	return true
}

// track registers an open connection for Close to close; once closed it closes
// conn and reports false.
func (c *Call) track(conn io.Closer) bool {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		_ = conn.Close()
		return false
	}
	c.conns[conn] = struct{}{}
	c.mu.Unlock()
	return true
}

func (c *Call) untrack(conn io.Closer) {
	c.mu.Lock()
	delete(c.conns, conn)
	c.mu.Unlock()
}

func (c *Call) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// Serve accepts connections on l until l is closed (it returns the accept
// error) or the call or proxy is closed (it returns nil). One listener serves
// HTTP proxy requests (absolute URLs, CONNECT) and SOCKS5 (told apart by the
// first byte, 0x05). Close closes l.
func (c *Call) Serve(l net.Listener) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		_ = l.Close()
		return ErrClosed
	}
	c.listeners[l] = struct{}{}
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.listeners, l)
		c.mu.Unlock()
	}()
	var backoff time.Duration
	for {
		conn, err := l.Accept()
		if err != nil {
			if c.isClosed() {
				return nil
			}
			if errors.Is(err, net.ErrClosed) {
				return err
			}
			// Out of file descriptors and the like: wait, as net/http does.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			select {
			case <-time.After(backoff):
				continue
			case <-c.ctx.Done():
				return nil
			}
		}
		backoff = 0
		c.accept(conn)
	}
}

func (c *Call) accept(conn net.Conn) {
	select {
	case c.p.slots <- struct{}{}:
	default:
		c.refuseBusy(conn)
		return
	}
	cc := newClientConn(conn, c.p.pol.IdleTimeout, func(cc *clientConn) {
		c.untrack(cc)
		<-c.p.slots
	})
	if !c.track(cc) {
		return
	}
	if !c.goFunc(func() { c.handle(cc) }) {
		_ = cc.Close()
	}
}

// handle tells SOCKS5 from HTTP by the first byte, without consuming it.
func (c *Call) handle(cc *clientConn) {
	_ = cc.SetReadDeadline(time.Now().Add(c.p.pol.HeaderTimeout))
	b, err := cc.peekByte()
	if err != nil {
		_ = cc.Close()
		return
	}
	if b == socks5Version {
		c.serveSOCKS(cc)
		return
	}
	_ = cc.SetReadDeadline(time.Time{})
	c.httpLn.push(cc)
}

// refuseBusy answers a connection over the limit, in a bounded number of
// goroutines (beyond those, the connection is just closed).
func (c *Call) refuseBusy(conn net.Conn) {
	select {
	case c.p.overflow <- struct{}{}:
	default:
		_ = conn.Close()
		return
	}
	ok := c.goFunc(func() {
		defer func() { <-c.p.overflow }()
		defer conn.Close()
		stop := context.AfterFunc(c.ctx, func() { _ = conn.Close() })
		defer stop()
		_ = conn.SetDeadline(time.Now().Add(time.Second))
		var first [1]byte
		if _, err := io.ReadFull(conn, first[:]); err != nil {
			return
		}
		msg := fmt.Sprintf("sandbash: egress proxy busy: %d connections are open, the most it takes; close some and retry\n", c.p.pol.MaxConns)
		if first[0] == socks5Version {
			_, _ = conn.Write([]byte{socks5Version, 0xff}) // no acceptable method: the client gives up
		} else {
			_, _ = io.WriteString(conn, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n"+
				"Content-Length: "+strconv.Itoa(len(msg))+"\r\n\r\n"+msg)
		}
		lingerClose(conn)
	})
	if !ok {
		<-c.p.overflow
		_ = conn.Close()
	}
}

// lingerClose half-closes conn and reads what the client still sends for a
// moment, so that closing does not reset the connection before the client has
// read our answer.
func lingerClose(conn net.Conn) {
	if cw, ok := conn.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	_ = conn.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	_, _ = io.Copy(io.Discard, io.LimitReader(conn, 64<<10))
}

// Close ends the call: its listeners, connections and goroutines, and returns
// when they are gone, every log line written. Idempotent.
func (c *Call) Close() {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		c.closed = true
		ls := make([]net.Listener, 0, len(c.listeners))
		for l := range c.listeners {
			ls = append(ls, l)
		}
		conns := make([]io.Closer, 0, len(c.conns))
		for conn := range c.conns {
			conns = append(conns, conn)
		}
		c.mu.Unlock()
		c.cancel()
		for _, l := range ls {
			_ = l.Close()
		}
		_ = c.httpLn.Close()
		_ = c.srv.Close()
		<-c.srvDone
		for _, conn := range conns {
			_ = conn.Close()
		}
		c.tr.CloseIdleConnections()
		c.wg.Wait()
		c.httpConns.Wait()
		c.tr.CloseIdleConnections()
		c.p.forget(c)
	})
}

// Denied lists the distinct destinations ("host:port") this call was denied, in
// the order first seen.
func (c *Call) Denied() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.denied...)
}

func (c *Call) noteDenied(dest string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.deniedSet[dest] {
		c.deniedSet[dest] = true
		c.denied = append(c.denied, dest)
	}
}
