package egress

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// watchdog calls fire once nothing touched it for idle. It runs no goroutine
// while waiting: a timer checks the last touch when it would expire.
type watchdog struct {
	idle time.Duration
	last atomic.Int64 // unix nanoseconds
	mu   sync.Mutex
	t    *time.Timer
	fire func()
}

func newWatchdog(idle time.Duration, fire func()) *watchdog {
	w := &watchdog{idle: idle, fire: fire}
	w.touch()
	w.mu.Lock()
	w.t = time.AfterFunc(idle, w.check)
	w.mu.Unlock()
	return w
}

func (w *watchdog) touch() { w.last.Store(time.Now().UnixNano()) }

func (w *watchdog) check() {
	since := time.Duration(time.Now().UnixNano() - w.last.Load())
	if since >= w.idle {
		w.fire()
		return
	}
	w.mu.Lock()
	w.t.Reset(w.idle - since)
	w.mu.Unlock()
}

func (w *watchdog) stop() {
	w.mu.Lock()
	w.t.Stop()
	w.mu.Unlock()
}

// clientConn is a connection from the sandbox. It frees its connection slot and
// stops its idle watchdog on Close (once), and counts as activity every read and
// write through it; tunnels splice its TCPConn directly and touch the watchdog
// themselves.
type clientConn struct {
	net.Conn
	tcp     *net.TCPConn // nil when the listener is not TCP
	pre     []byte       // a byte read to tell the protocol when it could not be peeked
	wd      *watchdog
	once    sync.Once
	onClose func()
}

func newClientConn(conn net.Conn, idle time.Duration, onClose func(*clientConn)) *clientConn {
	cc := &clientConn{Conn: conn}
	cc.onClose = func() { onClose(cc) }
	cc.tcp, _ = conn.(*net.TCPConn)
	cc.wd = newWatchdog(idle, func() { _ = cc.Close() })
	return cc
}

func (cc *clientConn) Read(b []byte) (int, error) {
	if len(cc.pre) > 0 {
		n := copy(b, cc.pre)
		cc.pre = cc.pre[n:]
		return n, nil
	}
	n, err := cc.Conn.Read(b)
	if n > 0 {
		cc.wd.touch()
	}
	return n, err
}

func (cc *clientConn) Write(b []byte) (int, error) {
	n, err := cc.Conn.Write(b)
	if n > 0 {
		cc.wd.touch()
	}
	return n, err
}

func (cc *clientConn) Close() error {
	err := net.ErrClosed
	cc.once.Do(func() {
		cc.wd.stop()
		err = cc.Conn.Close()
		cc.onClose()
	})
	return err
}

// CloseWrite half-closes a TCP client connection.
func (cc *clientConn) CloseWrite() error {
	if cc.tcp != nil {
		return cc.tcp.CloseWrite()
	}
	return nil
}

// peekByte returns the first byte the client sent, leaving it to be read.
func (cc *clientConn) peekByte() (byte, error) {
	if cc.tcp != nil {
		if b, err := peekTCP(cc.tcp); !errors.Is(err, errNoPeek) {
			return b, err
		}
	}
	var b [1]byte
	if _, err := io.ReadFull(cc.Conn, b[:]); err != nil {
		return 0, err
	}
	cc.pre = []byte{b[0]}
	return b[0], nil
}

var errNoPeek = errors.New("cannot peek")

// trackedConn is an upstream connection the call closes on Close.
type trackedConn struct {
	net.Conn
	once    sync.Once
	onClose func()
}

func (t *trackedConn) Close() error {
	err := net.ErrClosed
	t.once.Do(func() {
		err = t.Conn.Close()
		t.onClose()
	})
	return err
}

// chanListener hands connections to an http.Server.
type chanListener struct {
	ch   chan net.Conn
	done chan struct{}
	once sync.Once
}

func newChanListener() *chanListener {
	return &chanListener{ch: make(chan net.Conn), done: make(chan struct{})}
}

func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// push hands c to the server, or closes it when the listener is closed.
func (l *chanListener) push(c net.Conn) {
	select {
	case l.ch <- c:
	case <-l.done:
		_ = c.Close()
	}
}

func (l *chanListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *chanListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }

// prefixConn reads pre before the connection: bytes already buffered from it.
type prefixConn struct {
	net.Conn
	pre []byte
}

func (p *prefixConn) Read(b []byte) (int, error) {
	if len(p.pre) > 0 {
		n := copy(b, p.pre)
		p.pre = p.pre[n:]
		return n, nil
	}
	return p.Conn.Read(b)
}
