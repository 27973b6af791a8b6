package egress

import "bytes"

// ProxyEnv is the environment that points a sandbox's programs at the proxy
// listening on addr (host:port inside the sandbox): the HTTP proxy variables in
// both cases (curl reads only the lower-case http_proxy), ALL_PROXY for SOCKS5
// with names resolved by the proxy (socks5h), and NO_PROXY for the sandbox's
// own loopback, which never leaves it.
func ProxyEnv(addr string) []string {
	h := "http://" + addr
	s := "socks5h://" + addr
	const local = "localhost,127.0.0.1,::1"
	return []string{
		"http_proxy=" + h, "HTTP_PROXY=" + h,
		"https_proxy=" + h, "HTTPS_PROXY=" + h,
		"all_proxy=" + s, "ALL_PROXY=" + s,
		"no_proxy=" + local, "NO_PROXY=" + local,
	}
}

// CAEnvVars name the files that programs read trusted certificates from. Most
// of them replace the system's roots rather than add to them, so the file they
// point at must hold the system roots and the session CA: see CABundle.
var CAEnvVars = []string{"SSL_CERT_FILE", "NODE_EXTRA_CA_CERTS", "REQUESTS_CA_BUNDLE", "GIT_SSL_CAINFO", "CARGO_HTTP_CAINFO"}

// CABundle is systemPEM (the sandbox's own CA bundle, as found in its image)
// followed by the session CA certificate: the file for CAEnvVars. Without
// credentials it is systemPEM unchanged. It never holds a key.
func (p *Proxy) CABundle(systemPEM []byte) []byte {
	out := bytes.Clone(systemPEM)
	if p.ca == nil {
		return out
	}
	if len(out) > 0 && out[len(out)-1] != '\n' {
		out = append(out, '\n')
	}
	return append(out, p.ca.certPEM...)
}
