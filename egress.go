package sandbash

import (
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/sandbash/sandbash/backend"
	"github.com/sandbash/sandbash/internal/egress"
)

// Egress is a session's egress policy: with rules, calls reach the network
// only through sandbash's own proxy, which lets a connection through when
// a rule allows its destination. See the README's "Egress" section.
type Egress struct {
	// Allow lists the destinations calls may reach: "host" (exact),
	// "*.domain" (its subdomains), "host:port", an IP address or a CIDR.
	// Without a port, 80 and 443. No rules: no egress policy (the session's
	// Network applies).
	Allow []string
	// Resolve pins names for the proxy, as NAME=IP (like curl --resolve):
	// the proxy connects there instead of asking DNS, and a pinned
	// private address is allowed.
	Resolve []string
	// Credentials add a header to requests to a host, as
	// HOST=HEADER:env:VAR: the proxy adds "HEADER: <value of VAR>", read
	// from this process's environment when the session opens. The value
	// never enters the sandbox. For HTTPS the proxy terminates TLS to those
	// hosts with a per-session CA that calls trust.
	Credentials []string
	// UpstreamCAs are PEM certificates the proxy trusts, besides the
	// system's roots, when it connects over TLS to a credential's host (an
	// internal host with a private CA).
	UpstreamCAs []byte
	// Log, if set, receives one JSON line per connection attempt.
	Log io.Writer
}

// ErrBadEgress is returned by Open for an egress rule, pin or credential
// it cannot use.
var ErrBadEgress = errors.New("bad egress policy")

// proxyEnv is what a call's environment says about the proxy.
var proxyEnv = func() []string {
	u := "http://" + backend.ProxyAddr
	s := "socks5h://" + backend.ProxyAddr
	noProxy := "localhost,127.0.0.1,::1"
	var env []string
	for _, kv := range [][2]string{{"HTTP_PROXY", u}, {"HTTPS_PROXY", u}, {"ALL_PROXY", s}, {"NO_PROXY", noProxy}} {
		env = append(env, kv[0]+"="+kv[1], strings.ToLower(kv[0])+"="+kv[1])
	}
	return env
}()

// caVars are the variables through which common tools find extra trusted
// certificates: OpenSSL and Go (SSL_CERT_FILE), Node, Python requests,
// git, cargo.
var caVars = []string{"SSL_CERT_FILE", "NODE_EXTRA_CA_CERTS", "REQUESTS_CA_BUNDLE", "GIT_SSL_CAINFO", "CARGO_HTTP_CAINFO", "CURL_CA_BUNDLE"}

// caBundleName is the CA bundle's name in the session's HOME.
const caBundleName = ".sandbash-egress-ca.pem"

// systemCABundles are where distributions keep the trusted roots.
var systemCABundles = []string{"/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/cert.pem"}

// CheckEgress refuses an egress policy Open would refuse, with no side
// effects (credentials' variables are read, and must be set).
func CheckEgress(e *Egress, network backend.Network) error {
	_, err := checkEgress(e, network, "")
	return err
}

// checkEgress validates e without side effects, and returns the policy.
func checkEgress(e *Egress, network backend.Network, session string) (*egress.Policy, error) {
	if e == nil || len(e.Allow) == 0 {
		if e != nil && (len(e.Resolve) > 0 || len(e.Credentials) > 0) {
			return nil, fmt.Errorf("sandbash: egress pins and credentials apply to the egress proxy, which only allow rules turn on; add the destinations calls may reach: %w", ErrBadEgress)
		}
		return nil, nil
	}
	if network == backend.NetworkOn {
		return nil, fmt.Errorf("sandbash: egress rules and network %q: the rules limit the network to the destinations they allow, and network on opens all of it; drop one: %w", network, ErrBadEgress)
	}
	p := &egress.Policy{Resolve: map[string]netip.Addr{}, Log: e.Log, Session: session}
	for _, a := range e.Allow {
		r, err := egress.ParseRule(a)
		if err != nil {
			return nil, fmt.Errorf("sandbash: %w: %w", err, ErrBadEgress)
		}
		p.Allow = append(p.Allow, r)
	}
	for _, r := range e.Resolve {
		name, ip, err := egress.ParseResolve(r)
		if err != nil {
			return nil, fmt.Errorf("sandbash: %w: %w", err, ErrBadEgress)
		}
		p.Resolve[name] = ip
	}
	if len(e.UpstreamCAs) > 0 {
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(e.UpstreamCAs) {
			return nil, fmt.Errorf("sandbash: egress upstream CAs: no PEM certificate in them: %w", ErrBadEgress)
		}
		p.RootCAs = pool
	}
	for _, c := range e.Credentials {
		cr, err := egress.ParseCredential(c, os.Getenv)
		if err != nil {
			return nil, fmt.Errorf("sandbash: %w: %w", err, ErrBadEgress)
		}
		p.Credentials = append(p.Credentials, cr)
	}
	return p, nil
}

// startEgress starts the session's proxy, and returns the variables calls
// need to use it. With a CA, it writes the CA bundle into home (the host
// directory that is the calls' HOME).
func startEgress(p *egress.Policy, home string) (*egress.Proxy, []string, error) {
	proxy, err := egress.New(*p)
	if err != nil {
		return nil, nil, fmt.Errorf("sandbash: starting the egress proxy: %w", err)
	}
	env := append([]string(nil), proxyEnv...)
	if ca := proxy.CACertPEM(); ca != nil {
		var bundle []byte
		for _, f := range systemCABundles {
			if b, err := os.ReadFile(f); err == nil {
				bundle = append(b, '\n')
				break
			}
		}
		bundle = append(bundle, ca...)
		if err := writeCABundle(home, bundle); err != nil {
			proxy.Close()
			return nil, nil, fmt.Errorf("sandbash: writing the egress CA bundle: %w", err)
		}
		for _, v := range caVars {
			env = append(env, v+"="+filepath.Join(backend.Home, caBundleName))
		}
	}
	return proxy, env, nil
}

// writeCABundle puts bundle at caBundleName in home, the calls' HOME, as a
// new file renamed over whatever is there: a session's earlier calls could
// have left a symlink (or a hard link) at that name, and writing through it
// would let them have sandbash, possibly as root, overwrite the host file it
// leads to. The temporary name is created exclusively, so nothing a call
// left there is followed either.
func writeCABundle(home string, bundle []byte) error {
	f, err := os.CreateTemp(home, caBundleName+".*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(bundle)
	if err == nil {
		err = f.Chmod(0o644)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		if err = os.Rename(tmp, filepath.Join(home, caBundleName)); err != nil {
			err = fmt.Errorf("%w (a call left something at that name in HOME that is not a file; remove it, or open a new session)", err)
		}
	}
	if err != nil {
		_ = os.Remove(tmp)
	}
	return err
}

// egressCall serves one call's egress: the backend hands it the listener.
func egressCall(p *egress.Proxy, seq int) (*egress.Call, func(net.Listener)) {
	if p == nil {
		return nil, nil
	}
	c := p.Call(strconv.Itoa(seq))
	return c, func(l net.Listener) { go func() { _ = c.Serve(l) }() }
}
