package egress

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"testing"

	"golang.org/x/net/proxy"
)

// The benchmarks compare the same transfer direct and through the proxy, on
// loopback: `go test -run '^$' -bench . ./internal/egress/`.

const benchSize = 100 << 20 // the 100 MB download

// benchProxy starts a proxy allowing bench.test:port (pinned to loopback).
func benchProxy(b *testing.B, port string) string {
	b.Helper()
	p, err := New(Policy{
		Allow:    []Rule{mustRule(b, "bench.test:"+port)},
		Resolve:  map[string]netip.Addr{"bench.test": netip.MustParseAddr("127.0.0.1")},
		Resolver: &testResolver{},
	})
	if err != nil {
		b.Fatal(err)
	}
	c := p.Call("bench")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = c.Serve(l) }()
	b.Cleanup(func() { _ = p.Close() })
	return l.Addr().String()
}

// sink reads like a client with a large buffer (io.Discard's ReadFrom would
// read 8 KiB at a time, slowing the direct case as much as the proxied one).
func sink(b *testing.B, r io.Reader) int64 {
	buf := make([]byte, 256<<10)
	var n int64
	for {
		m, err := r.Read(buf)
		n += int64(m)
		if err == io.EOF {
			return n
		}
		if err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkProxyGET(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	paddr := benchProxy(b, port)
	pu, _ := url.Parse("http://" + paddr)
	run := func(b *testing.B, tr *http.Transport, u string) {
		defer tr.CloseIdleConnections()
		c := &http.Client{Transport: tr}
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			resp, err := c.Get(u)
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				b.Fatal(resp.Status)
			}
		}
	}
	b.Run("direct", func(b *testing.B) { run(b, &http.Transport{}, srv.URL+"/") })
	b.Run("proxy", func(b *testing.B) {
		run(b, &http.Transport{Proxy: http.ProxyURL(pu)}, "http://bench.test:"+port+"/")
	})
	b.Run("proxy-new-conn", func(b *testing.B) { // no keep-alive: a new proxy connection and upstream dial per request
		run(b, &http.Transport{Proxy: http.ProxyURL(pu), DisableKeepAlives: true}, "http://bench.test:"+port+"/")
	})
}

func BenchmarkProxyThroughput(b *testing.B) {
	chunk := make([]byte, 1<<20)
	// An HTTP server sending benchSize bytes...
	hsrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(benchSize))
		for sent := 0; sent < benchSize; sent += len(chunk) {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}))
	defer hsrv.Close()
	_, hport, _ := net.SplitHostPort(hsrv.Listener.Addr().String())
	// ...and a TCP server sending benchSize bytes on every connection, for the tunnels.
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer tl.Close()
	go func() {
		for {
			c, err := tl.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				for sent := 0; sent < benchSize; sent += len(chunk) {
					if _, err := c.Write(chunk); err != nil {
						return
					}
				}
			}()
		}
	}()
	_, tport, _ := net.SplitHostPort(tl.Addr().String())

	hproxy := benchProxy(b, hport)
	tproxy := benchProxy(b, tport)
	pu, _ := url.Parse("http://" + hproxy)

	httpGet := func(b *testing.B, tr *http.Transport, u string) {
		defer tr.CloseIdleConnections()
		c := &http.Client{Transport: tr}
		b.SetBytes(benchSize)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			resp, err := c.Get(u)
			if err != nil {
				b.Fatal(err)
			}
			if n := sink(b, resp.Body); n != benchSize {
				b.Fatalf("got %d bytes", n)
			}
			resp.Body.Close()
		}
	}
	tcpRead := func(b *testing.B, dial func() (net.Conn, io.Reader)) {
		b.SetBytes(benchSize)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			c, r := dial()
			if n := sink(b, r); n != benchSize {
				b.Fatalf("got %d bytes", n)
			}
			c.Close()
		}
	}
	b.Run("http-direct", func(b *testing.B) { httpGet(b, &http.Transport{}, hsrv.URL+"/") })
	b.Run("http-proxy", func(b *testing.B) {
		httpGet(b, &http.Transport{Proxy: http.ProxyURL(pu)}, "http://bench.test:"+hport+"/")
	})
	b.Run("tcp-direct", func(b *testing.B) {
		tcpRead(b, func() (net.Conn, io.Reader) {
			c, err := net.Dial("tcp", tl.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			return c, c
		})
	})
	b.Run("connect-tunnel", func(b *testing.B) {
		tcpRead(b, func() (net.Conn, io.Reader) {
			c, err := net.Dial("tcp", tproxy)
			if err != nil {
				b.Fatal(err)
			}
			fmt.Fprintf(c, "CONNECT bench.test:%s HTTP/1.1\r\nHost: bench.test\r\n\r\n", tport)
			br := bufio.NewReaderSize(c, 256<<10)
			resp, err := http.ReadResponse(br, nil)
			if err != nil || resp.StatusCode != 200 {
				b.Fatalf("CONNECT: %v %v", resp, err)
			}
			return c, br
		})
	})
	b.Run("socks5-tunnel", func(b *testing.B) {
		d, err := proxy.SOCKS5("tcp", tproxy, nil, proxy.Direct)
		if err != nil {
			b.Fatal(err)
		}
		tcpRead(b, func() (net.Conn, io.Reader) {
			c, err := d.Dial("tcp", "bench.test:"+tport)
			if err != nil {
				b.Fatal(err)
			}
			return c, c
		})
	})
}
