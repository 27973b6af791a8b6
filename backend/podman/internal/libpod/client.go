// Package libpod is a small client of Podman's libpod REST API: the
// requests the Podman backend makes, over plain net/http, instead of
// Podman's Go bindings (github.com/containers/podman/v5/pkg/bindings),
// whose dependencies (containers/storage, containers/image, specgen, a cgo
// constructor in pkg/rootless) cost every sandbash process start-up time
// and memory in their package initialisation.
//
// It speaks to the service as the bindings of Podman v5.8.0 do: the same
// paths under /v5.8.0/libpod, the same query parameters and JSON field
// names (the spec of a container is [SpecGenerator], the fields of
// Podman's specgen.SpecGenerator the backend sets), and the same errors:
// a service's error is an [*Error], its message the service's. A Unix
// socket (unix:///path) or plain TCP (tcp://host:port, through
// CONTAINER_PROXY if set) is reached; ssh:// is not.
package libpod

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/proxy"
)

// APIVersion is the version in the path of every request: what Podman
// v5.8.0's bindings send, which services from 4.0 on accept.
const APIVersion = "5.8.0"

// minService is the oldest service the bindings talk to (their
// MinimalAPI): its ping's Libpod-API-Version must be at least this.
var minService = [3]int{4, 0, 0}

// Client is a connection to one Podman service. It is safe for
// concurrent use.
type Client struct {
	// URI is the service's address as given.
	URI  string
	base string // http://d for a socket, http://host[/prefix] for TCP
	dial func(ctx context.Context) (net.Conn, error)
	hc   *http.Client
}

// New returns a client of the service at uri (unix:///path, or
// unix://path, read as /path as the bindings do; tcp://host:port[/prefix]).
// It does not connect: see [Client.Ping].
func New(uri string) (*Client, error) {
	u, err := url.Parse(uri)
	if err != nil {
		return nil, fmt.Errorf("the Podman service address is not a valid URL: %s: %w", uri, err)
	}
	c := &Client{URI: uri, base: "http://d"}
	switch u.Scheme {
	case "unix":
		path := u.Path
		if !strings.HasPrefix(uri, "unix:///") {
			path = "/" + u.Host + u.Path
		}
		c.dial = func(ctx context.Context) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", path)
		}
	case "tcp":
		if !strings.HasPrefix(uri, "tcp://") {
			return nil, errors.New("tcp URIs should begin with tcp://")
		}
		c.base = "http://" + u.Host + u.Path
		d, err := tcpDialer()
		if err != nil {
			return nil, err
		}
		c.dial = func(ctx context.Context) (net.Conn, error) { return d.DialContext(ctx, "tcp", u.Host) }
	case "ssh":
		return nil, fmt.Errorf("sandbash does not reach a Podman service over ssh (%s); forward its socket (ssh -NL /tmp/podman.sock:/run/podman/podman.sock HOST) and give unix:///tmp/podman.sock", uri)
	default:
		return nil, fmt.Errorf("cannot reach a Podman service at %s: the scheme %q is neither unix nor tcp; give unix:///path/to/podman.sock or tcp://HOST:PORT", uri, u.Scheme)
	}
	c.hc = &http.Client{Transport: &http.Transport{
		DialContext:        func(ctx context.Context, _, _ string) (net.Conn, error) { return c.dialRetry(ctx) },
		DisableCompression: true,
	}}
	return c, nil
}

// tcpDialer dials directly, or through CONTAINER_PROXY when it is set, as
// the bindings do (with a 3 s bound on the proxy's dial).
func tcpDialer() (proxy.ContextDialer, error) {
	p, ok := os.LookupEnv("CONTAINER_PROXY")
	if !ok {
		return &net.Dialer{}, nil
	}
	pu, err := url.Parse(p)
	if err != nil {
		return nil, fmt.Errorf("value of CONTAINER_PROXY is not a valid url: %s: %w", p, err)
	}
	d, err := proxy.FromURL(pu, proxy.Direct)
	if err != nil {
		return nil, fmt.Errorf("unable to dial to proxy %s, %w", p, err)
	}
	return proxyDialer{d}, nil
}

type proxyDialer struct{ d proxy.Dialer }

func (p proxyDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	if cd, ok := p.d.(proxy.ContextDialer); ok {
		ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		return cd.DialContext(ctx, network, addr)
	}
	return p.d.Dial(network, addr)
}

// dialRetry connects, trying three times 100 and 200 ms apart, as the
// bindings retry a request (a socket's backlog full under many sessions,
// a socket-activated service starting). Only the connection is retried:
// a request that reached the service is never sent twice.
func (c *Client) dialRetry(ctx context.Context) (net.Conn, error) {
	for i := 1; ; i++ {
		conn, err := c.dial(ctx)
		if err == nil || i == 3 || ctx.Err() != nil {
			return conn, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(time.Duration(i*100) * time.Millisecond):
		}
	}
}

// CloseIdleConnections closes the connections kept for later requests.
func (c *Client) CloseIdleConnections() { c.hc.CloseIdleConnections() }

// Error is the service's error model: what the bindings return as
// errorhandling.ErrorModel. Error() is the service's message.
type Error struct {
	Because      string `json:"cause"`
	Message      string `json:"message"`
	ResponseCode int    `json:"response"`
}

func (e *Error) Error() string { return e.Message }

// IsNotFound reports whether err is the service saying that what was asked
// for does not exist (404).
func IsNotFound(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.ResponseCode == http.StatusNotFound
}

// path is the request's path: APIVersion, then format with each of args
// escaped as one path element.
func path(format string, args ...string) string {
	a := make([]any, len(args))
	for i, s := range args {
		a[i] = url.PathEscape(s)
	}
	return prefix + fmt.Sprintf(format, a...)
}

// prefix comes before every path.
const prefix = "/v" + APIVersion + "/libpod"

// request builds a request of p (from [path]) with query q and body in
// (JSON) if not nil.
func (c *Client) request(ctx context.Context, method, p string, q url.Values, in any) (*http.Request, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+p, body)
	if err != nil {
		return nil, err
	}
	if len(q) > 0 {
		req.URL.RawQuery = q.Encode()
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return req, nil
}

// do sends a request; the caller closes the response's body.
func (c *Client) do(ctx context.Context, method, p string, q url.Values, in any) (*http.Response, error) {
	req, err := c.request(ctx, method, p, q, in)
	if err != nil {
		return nil, err
	}
	return c.hc.Do(req)
}

// call sends a request and decodes a successful answer (2xx, 3xx) into
// out, if not nil; any other answer is the service's [*Error].
func (c *Client) call(ctx context.Context, method, p string, q url.Values, in, out any) error {
	resp, err := c.do(ctx, method, p, q, in)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return process(resp, out)
}

// process reads resp's body as the bindings' APIResponse.Process does.
func process(resp *http.Response, out any) error {
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("unable to process API response: %w", err)
	}
	if resp.StatusCode/100 == 2 || resp.StatusCode/100 == 3 {
		if out == nil {
			return nil
		}
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("decoding the Podman service's answer to %s %s: %w (%.200q)", resp.Request.Method, resp.Request.URL.Path, err, data)
		}
		return nil
	}
	return errorOf(resp, data)
}

// errorOf is the service's error in an unsuccessful answer: its JSON
// error model, else the body as the message.
func errorOf(resp *http.Response, data []byte) error {
	e := &Error{}
	if resp.StatusCode == http.StatusConflict || resp.Header.Get("Content-Type") == "application/json" {
		if json.Unmarshal(data, e) == nil && e.Message != "" {
			if e.ResponseCode == 0 {
				e.ResponseCode = resp.StatusCode
			}
			return e
		}
	}
	return &Error{Message: string(data), ResponseCode: resp.StatusCode}
}

// Ping checks that the service answers and that its API is one the
// bindings speak (4.0.0 or later), as the bindings' NewConnection does.
func (c *Client) Ping(ctx context.Context) error {
	resp, err := c.do(ctx, http.MethodGet, path("/_ping"), nil, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("ping response was %d", resp.StatusCode)
	}
	h := resp.Header.Get("Libpod-API-Version")
	if h == "" {
		// The bindings warn and go on.
		return nil
	}
	v, err := parseVersion(h)
	if err != nil {
		return err
	}
	for i := range v {
		if v[i] != minService[i] {
			if v[i] < minService[i] {
				return fmt.Errorf("server API version is too old. Client %q server %q", "4.0.0", h)
			}
			break
		}
	}
	return nil
}

// parseVersion reads MAJOR[.MINOR[.PATCH]] with an optional leading v and
// any -pre or +build suffix, as semver.ParseTolerant does.
func parseVersion(s string) ([3]int, error) {
	var v [3]int
	t := strings.TrimPrefix(strings.TrimSpace(s), "v")
	if i := strings.IndexAny(t, "-+"); i >= 0 {
		t = t[:i]
	}
	parts := strings.Split(t, ".")
	if len(parts) > 3 {
		return v, fmt.Errorf("the service's API version %q is not a version", s)
	}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return v, fmt.Errorf("the service's API version %q is not a version", s)
		}
		v[i] = n
	}
	return v, nil
}
