package egress

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

var discardLog = log.New(io.Discard, "", 0)

// reqState follows one proxied HTTP request, from the handler into the
// transport's dialer and the reverse proxy's hooks.
type reqState struct {
	d    *decision
	cred *Credential
	mitm *mitmConn // set for requests inside a TLS-terminated CONNECT
	up   atomic.Int64
	down atomic.Int64
	mu   sync.Mutex
	ip   netip.Addr
	err  error
}

func (s *reqState) setIP(a net.Addr) {
	if ta, ok := a.(*net.TCPAddr); ok {
		if ip, ok := netip.AddrFromSlice(ta.IP); ok {
			s.mu.Lock()
			s.ip = ip.Unmap()
			s.mu.Unlock()
		}
	}
}

type stateKey struct{}
type mitmKey struct{}

func stateFrom(ctx context.Context) *reqState {
	st, _ := ctx.Value(stateKey{}).(*reqState)
	return st
}

func newCall(p *Proxy, id string) *Call {
	ctx, cancel := context.WithCancel(context.Background())
	c := &Call{
		p:         p,
		id:        id,
		ctx:       ctx,
		cancel:    cancel,
		httpLn:    newChanListener(),
		listeners: make(map[net.Listener]struct{}),
		conns:     make(map[io.Closer]struct{}),
		deniedSet: make(map[string]bool),
		srvDone:   make(chan struct{}),
	}
	c.tr = &http.Transport{
		Proxy:                  nil, // never the host's proxy settings
		DialContext:            c.dialForTransport,
		TLSClientConfig:        &tls.Config{RootCAs: p.pol.RootCAs, MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout:    p.pol.HeaderTimeout,
		TLSNextProto:           map[string]func(string, *tls.Conn) http.RoundTripper{}, // HTTP/1.1 only
		DisableCompression:     true,                                                   // pass encodings through untouched
		MaxIdleConns:           32,
		MaxIdleConnsPerHost:    8,
		IdleConnTimeout:        90 * time.Second,
		MaxResponseHeaderBytes: 1 << 20,
		ReadBufferSize:         64 << 10,
		WriteBufferSize:        64 << 10,
	}
	c.srv = &http.Server{
		Handler:           c,
		ReadHeaderTimeout: p.pol.HeaderTimeout,
		IdleTimeout:       p.pol.IdleTimeout,
		MaxHeaderBytes:    p.pol.MaxHeaderBytes,
		ErrorLog:          discardLog,
		TLSNextProto:      map[string]func(*http.Server, *tls.Conn, http.Handler){},
		BaseContext:       func(net.Listener) context.Context { return ctx },
		ConnContext: func(ctx context.Context, conn net.Conn) context.Context {
			if mc, ok := conn.(*mitmConn); ok {
				return context.WithValue(ctx, mitmKey{}, mc)
			}
			return ctx
		},
		ConnState: func(_ net.Conn, s http.ConnState) {
			switch s {
			case http.StateNew:
				c.httpConns.Add(1)
			case http.StateHijacked, http.StateClosed:
				c.httpConns.Done()
			}
		},
	}
	c.rp = c.reverseProxy()
	c.socks = c.newSOCKS()
	go func() {
		defer close(c.srvDone)
		_ = c.srv.Serve(c.httpLn)
	}()
	return c
}

// reverseProxy makes the call's forwarder of HTTP requests (plain, and inside a
// TLS-terminated CONNECT). Rewrite adds the credential; hop-by-hop headers
// (Connection, Proxy-Authorization, ...) are already gone by then.
func (c *Call) reverseProxy() *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			st := stateFrom(pr.In.Context())
			if st.mitm != nil {
				pr.Out.URL.Scheme = "https"
				pr.Out.URL.Host = authority(st.d.host, st.d.port, 443)
			}
			pr.Out.Host = "" // the Host header is the URL's host
			if st.cred != nil {
				pr.Out.Header.Set(st.cred.Header, st.cred.value)
			}
		},
		Transport:  c.tr,
		BufferPool: bufPool{},
		ErrorLog:   discardLog,
		ModifyResponse: func(resp *http.Response) error {
			if st := stateFrom(resp.Request.Context()); st != nil && resp.StatusCode != http.StatusSwitchingProtocols {
				resp.Body = &countBody{ReadCloser: resp.Body, n: &st.down}
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			st := stateFrom(r.Context())
			var dn *denial
			switch {
			case errors.As(err, &dn):
				st.mu.Lock()
				st.err = err
				st.mu.Unlock()
				http.Error(w, dn.msg, http.StatusForbidden)
			default:
				msg := err.Error()
				if !strings.HasPrefix(msg, "sandbash: ") {
					msg = fmt.Sprintf("sandbash: egress to %s failed: %s", st.d.dest, msg)
				}
				st.mu.Lock()
				st.err = errors.New(msg)
				st.mu.Unlock()
				http.Error(w, msg, http.StatusBadGateway)
			}
		},
	}
}

// normHost is host as decide normalizes it (for comparison only).
func normHost(host string) string {
	if a, err := netip.ParseAddr(host); err == nil {
		return a.Unmap().String()
	}
	return strings.ToLower(strings.TrimSuffix(host, "."))
}

func authority(host string, port, def int) string {
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	if port == def {
		return host
	}
	return host + ":" + strconv.Itoa(port)
}

// dialForTransport dials for the reverse proxy: with the decision the handler
// made for this request when there is one, else deciding anew. Either way only
// checked addresses are dialled.
func (c *Call) dialForTransport(ctx context.Context, _, addr string) (net.Conn, error) {
	var d *decision
	if st := stateFrom(ctx); st != nil {
		d = st.d
	}
	host, port, err := splitHostPort(addr, 0)
	if err != nil {
		return nil, err
	}
	if d == nil || d.port != port || d.host != normHost(host) {
		d = c.decide(ctx, host, port)
		if d.deny != nil {
			c.logDeny("http", d)
		}
	}
	conn, _, err := c.dialDecision(ctx, d)
	if err != nil {
		return nil, err
	}
	tc := &trackedConn{Conn: conn}
	tc.onClose = func() { c.untrack(tc) }
	if !c.track(tc) {
		return nil, ErrClosed
	}
	return tc, nil
}

// ServeHTTP serves proxy requests: CONNECT, absolute-URL requests, and the
// requests inside a TLS-terminated CONNECT.
func (c *Call) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !c.enter() {
		http.Error(w, "sandbash: the egress proxy is closed", http.StatusServiceUnavailable)
		return
	}
	defer c.wg.Done()
	if mc, ok := r.Context().Value(mitmKey{}).(*mitmConn); ok {
		c.serveMITM(w, r, mc)
		return
	}
	if r.Method == http.MethodConnect {
		c.serveConnect(w, r)
		return
	}
	c.serveForward(w, r)
}

func (c *Call) serveForward(w http.ResponseWriter, r *http.Request) {
	if !r.URL.IsAbs() || r.URL.Host == "" {
		http.Error(w, "sandbash: this is the egress proxy: send requests with an absolute URL (http_proxy) or CONNECT (https_proxy)", http.StatusBadRequest)
		return
	}
	if r.URL.Scheme != "http" {
		http.Error(w, "sandbash: the egress proxy forwards http:// URLs; for https:// use CONNECT (set https_proxy)", http.StatusBadRequest)
		return
	}
	host, port, err := splitHostPort(r.URL.Host, 80)
	if err != nil {
		http.Error(w, "sandbash: bad destination "+strconv.Quote(r.URL.Host)+": "+err.Error(), http.StatusBadRequest)
		return
	}
	d := c.decide(r.Context(), host, port)
	if d.deny != nil {
		c.logDeny("http", d)
		http.Error(w, d.deny.msg, http.StatusForbidden)
		return
	}
	st := &reqState{d: d, cred: c.p.creds[d.host]}
	if r.Body != nil && r.Body != http.NoBody {
		r.Body = &countBody{ReadCloser: r.Body, n: &st.up}
	}
	ctx := context.WithValue(r.Context(), stateKey{}, st)
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn: func(i httptrace.GotConnInfo) { st.setIP(i.Conn.RemoteAddr()) },
	})
	c.rp.ServeHTTP(w, r.WithContext(ctx))
	st.mu.Lock()
	ip, err := st.ip, st.err
	st.mu.Unlock()
	c.logAllow("http", d, ip, st.up.Load(), st.down.Load(), st.cred, err)
}

func (c *Call) serveConnect(w http.ResponseWriter, r *http.Request) {
	host, port, err := splitHostPort(r.Host, 0)
	if err != nil {
		http.Error(w, "sandbash: CONNECT needs host:port: "+err.Error(), http.StatusBadRequest)
		return
	}
	d := c.decide(r.Context(), host, port)
	if d.deny != nil {
		c.logDeny("connect", d)
		http.Error(w, d.deny.msg, http.StatusForbidden)
		return
	}
	if cred := c.p.creds[d.host]; cred != nil && port == 443 {
		c.connectMITM(w, d, cred)
		return
	}
	up, cand, err := c.dialDecision(r.Context(), d)
	if err != nil {
		c.logAllow("connect", d, netip.Addr{}, 0, 0, nil, err)
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	if !c.track(up) {
		return
	}
	defer c.untrack(up)
	cc, pre, err := hijack(w)
	if err != nil {
		_ = up.Close()
		return
	}
	if _, err := io.WriteString(cc, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		_ = up.Close()
		_ = cc.Close()
		return
	}
	upN, downN := c.tunnel(cc, pre, up)
	c.logAllow("connect", d, cand.ip, upN, downN, nil, nil)
}

// hijack takes the client connection over, with what the server had buffered.
func hijack(w http.ResponseWriter) (*clientConn, []byte, error) {
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return nil, nil, err
	}
	cc, ok := conn.(*clientConn)
	if !ok {
		_ = conn.Close()
		return nil, nil, errors.New("not a client connection")
	}
	var pre []byte
	if n := brw.Reader.Buffered(); n > 0 {
		b, _ := brw.Reader.Peek(n)
		pre = append([]byte(nil), b...)
	}
	return cc, pre, nil
}

// connectMITM terminates TLS for a credential host with the session CA's leaf,
// then hands the decrypted connection to the HTTP server, whose requests
// serveMITM forwards over verified TLS with the credential added.
func (c *Call) connectMITM(w http.ResponseWriter, d *decision, cred *Credential) {
	cc, pre, err := hijack(w)
	if err != nil {
		return
	}
	if _, err := io.WriteString(cc, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		_ = cc.Close()
		return
	}
	var raw net.Conn = cc
	if len(pre) > 0 {
		raw = &prefixConn{Conn: cc, pre: pre}
	}
	tc := tls.Server(raw, &tls.Config{
		Certificates: []tls.Certificate{*c.p.ca.leaves[d.host]},
		NextProtos:   []string{"http/1.1"},
		MinVersion:   tls.VersionTLS12,
	})
	_ = cc.SetDeadline(time.Now().Add(c.p.pol.HeaderTimeout))
	err = tc.HandshakeContext(c.ctx)
	_ = cc.SetDeadline(time.Time{})
	if err != nil {
		_ = cc.Close()
		c.logAllow("connect", d, netip.Addr{}, 0, 0, cred,
			fmt.Errorf("TLS handshake with the client failed (does it trust the session CA?): %w", err))
		return
	}
	mc := &mitmConn{Conn: tc, call: c, d: d, cred: cred}
	c.httpLn.push(mc)
}

// mitmConn is the decrypted side of a TLS-terminated CONNECT. It writes the
// CONNECT's log line when it closes.
type mitmConn struct {
	net.Conn // *tls.Conn
	call     *Call
	d        *decision
	cred     *Credential
	in, out  atomic.Int64
	mu       sync.Mutex
	ip       netip.Addr
	err      error
	once     sync.Once
}

func (m *mitmConn) Read(b []byte) (int, error) {
	n, err := m.Conn.Read(b)
	m.in.Add(int64(n))
	return n, err
}

func (m *mitmConn) Write(b []byte) (int, error) {
	n, err := m.Conn.Write(b)
	m.out.Add(int64(n))
	return n, err
}

func (m *mitmConn) Close() error {
	err := net.ErrClosed
	m.once.Do(func() {
		err = m.Conn.Close()
		m.mu.Lock()
		ip, e := m.ip, m.err
		m.mu.Unlock()
		m.call.logAllow("connect", m.d, ip, m.in.Load(), m.out.Load(), m.cred, e)
	})
	return err
}

func (c *Call) serveMITM(w http.ResponseWriter, r *http.Request, mc *mitmConn) {
	if r.Method == http.MethodConnect {
		http.Error(w, "sandbash: CONNECT inside a CONNECT tunnel is not supported", http.StatusBadRequest)
		return
	}
	st := &reqState{d: mc.d, cred: mc.cred, mitm: mc}
	ctx := context.WithValue(r.Context(), stateKey{}, st)
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn: func(i httptrace.GotConnInfo) { st.setIP(i.Conn.RemoteAddr()) },
	})
	c.rp.ServeHTTP(w, r.WithContext(ctx))
	st.mu.Lock()
	ip, err := st.ip, st.err
	st.mu.Unlock()
	mc.mu.Lock()
	if ip.IsValid() {
		mc.ip = ip
	}
	if err != nil && mc.err == nil {
		mc.err = err
	}
	mc.mu.Unlock()
}

func (c *Call) logDeny(proto string, d *decision) {
	c.noteDenied(d.dest)
	e := &logEntry{Call: c.id, Proto: proto, Host: d.host, Port: d.port, Decision: "deny", Rule: d.deny.reason}
	if d.deny.ip.IsValid() {
		e.IP = d.deny.ip.String()
	}
	c.p.writeLog(e)
}

func (c *Call) logAllow(proto string, d *decision, ip netip.Addr, up, down int64, cred *Credential, err error) {
	e := &logEntry{Call: c.id, Proto: proto, Host: d.host, Port: d.port, Decision: "allow", Rule: d.rule(),
		BytesUp: up, BytesDown: down}
	if !ip.IsValid() && len(d.cands) > 0 {
		ip = d.cands[0].ip
	}
	if ip.IsValid() {
		e.IP = ip.String()
	}
	if cred != nil {
		e.Credential = cred.Header
	}
	if err != nil {
		e.Error = err.Error()
	}
	c.p.writeLog(e)
}

// countBody counts the bytes read through a body.
type countBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b *countBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

// bufPool lends the reverse proxy 64 KiB copy buffers (at most one per open
// connection: 16 MiB at the default limit).
type bufPool struct{}

var copyBufs = sync.Pool{New: func() any { b := make([]byte, 64<<10); return &b }}

func (bufPool) Get() []byte  { return *copyBufs.Get().(*[]byte) }
func (bufPool) Put(b []byte) { copyBufs.Put(&b) }
