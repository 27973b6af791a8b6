package egress

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// ErrBadRule is wrapped by every error ParseRule returns.
var ErrBadRule = errors.New("bad egress allow rule")

// ErrBadResolve is wrapped by every error ParseResolve returns.
var ErrBadResolve = errors.New("bad egress resolve pin")

// acceptedForms ends every ParseRule error, so the user sees what would work.
const acceptedForms = "accepted forms: host (example.com), *.domain (any subdomain, not the domain itself), " +
	"host:port, an IP (1.2.3.4, ::1, [::1]:443), a CIDR (10.0.0.0/8, 10.0.0.0/8:22, [fd00::/8]:22); " +
	"without a port a rule allows ports 80 and 443"

type ruleKind uint8

const (
	kindHost   ruleKind = iota // exact host name
	kindSuffix                 // *.domain: any name below domain, not domain itself
	kindAddr                   // one IP address
	kindPrefix                 // a CIDR
)

// Rule is one allowed destination (one --allow). The zero Rule matches nothing.
type Rule struct {
	kind   ruleKind
	host   string       // kindHost: the name; kindSuffix: the domain without "*."
	prefix netip.Prefix // kindAddr (a full-length prefix) and kindPrefix; always unmapped
	port   uint16       // 0: ports 80 and 443
	valid  bool
}

// String gives the rule in its canonical form (lower case, no trailing dot), as
// logged in the "rule" field.
func (r Rule) String() string {
	if !r.valid {
		return ""
	}
	var h string
	switch r.kind {
	case kindHost:
		h = r.host
	case kindSuffix:
		h = "*." + r.host
	case kindAddr:
		h = r.prefix.Addr().String()
	case kindPrefix:
		h = r.prefix.String()
	}
	if r.port == 0 {
		return h
	}
	if r.prefix.IsValid() && r.prefix.Addr().Is6() {
		h = "[" + h + "]"
	}
	return h + ":" + strconv.Itoa(int(r.port))
}

func (r Rule) isIP() bool { return r.kind == kindAddr || r.kind == kindPrefix }

func (r Rule) portOK(port int) bool {
	if r.port == 0 {
		return port == 80 || port == 443
	}
	return int(r.port) == port
}

// matchName reports whether a name rule allows host (normalized) on port.
func (r Rule) matchName(host string, port int) bool {
	if !r.valid || !r.portOK(port) {
		return false
	}
	switch r.kind {
	case kindHost:
		return host == r.host
	case kindSuffix:
		return len(host) > len(r.host)+1 && strings.HasSuffix(host, "."+r.host)
	}
	return false
}

// matchIP reports whether an IP rule allows ip (unmapped) on port.
func (r Rule) matchIP(ip netip.Addr, port int) bool {
	return r.valid && r.isIP() && r.portOK(port) && r.prefix.Contains(ip)
}

// ParseRule parses one --allow destination: host, *.domain, host:port, an IP
// literal, or a CIDR, each optionally with :port (IPv6 in brackets when a port
// follows). Without a port the rule allows 80 and 443. Errors wrap ErrBadRule
// and list the accepted forms.
func ParseRule(s string) (Rule, error) {
	r, err := parseRule(s)
	if err != nil {
		return Rule{}, fmt.Errorf("%w %q: %s; %s", ErrBadRule, s, err.Error(), acceptedForms)
	}
	return r, nil
}

func parseRule(s string) (Rule, error) {
	if s == "" {
		return Rule{}, errors.New("it is empty")
	}
	if strings.ContainsFunc(s, func(c rune) bool { return c <= ' ' || c == 0x7f }) {
		return Rule{}, errors.New("it contains white space or control characters")
	}
	if strings.Contains(s, "://") {
		return Rule{}, errors.New("it is a URL; give the host alone (example.com, not https://example.com/)")
	}
	host, port, err := splitRule(s)
	if err != nil {
		return Rule{}, err
	}
	r := Rule{valid: true}
	if port != "" {
		p, err := parsePort(port)
		if err != nil {
			return Rule{}, err
		}
		r.port = uint16(p)
	}
	switch {
	case strings.Contains(host, "/"):
		p, err := netip.ParsePrefix(host)
		if err != nil {
			return Rule{}, errors.New("it has a path, or is a CIDR that does not parse (a CIDR is ADDRESS/BITS, like 10.0.0.0/8)")
		}
		p = unmapPrefix(p.Masked())
		if why, ok := deniedPrefix(p); ok {
			return Rule{}, fmt.Errorf("%s lies within %s, which is always denied: no rule can allow it", p, why)
		}
		r.kind, r.prefix = kindPrefix, p
	case isIPLiteral(host):
		a, err := netip.ParseAddr(host)
		if err != nil {
			return Rule{}, fmt.Errorf("%q is not a valid IP address", host)
		}
		if a.Zone() != "" {
			return Rule{}, errors.New("an IPv6 zone (%eth0) cannot be used")
		}
		a = a.Unmap()
		if class, why := classifyStatic(a); class == classForbidden {
			return Rule{}, fmt.Errorf("%s is %s, which is always denied: no rule can allow it", a, why)
		}
		r.kind, r.prefix = kindAddr, netip.PrefixFrom(a, a.BitLen())
	case strings.HasPrefix(host, "*."):
		name, err := normalizeName(host[2:])
		if err != nil {
			return Rule{}, err
		}
		r.kind, r.host = kindSuffix, name
	case strings.Contains(host, "*"):
		return Rule{}, errors.New("a wildcard may only stand alone as the first label (*.example.com), and * alone is not allowed")
	default:
		name, err := normalizeName(host)
		if err != nil {
			return Rule{}, err
		}
		r.kind, r.host = kindHost, name
	}
	return r, nil
}

// splitRule splits s into host and port ("" when none).
func splitRule(s string) (host, port string, err error) {
	if strings.HasPrefix(s, "[") {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return "", "", errors.New("a '[' without its ']'")
		}
		host, rest := s[1:end], s[end+1:]
		if !strings.Contains(host, ":") {
			return "", "", errors.New("brackets are only for IPv6 addresses ([::1]:443)")
		}
		if rest != "" {
			p, ok := strings.CutPrefix(rest, ":")
			if !ok {
				return "", "", errors.New("only :port may follow ']'")
			}
			if p == "" {
				return "", "", errors.New("the port after ':' is missing")
			}
			return host, p, nil
		}
		return host, "", nil
	}
	switch strings.Count(s, ":") {
	case 0:
		return s, "", nil
	case 1:
		h, p, _ := strings.Cut(s, ":")
		if h == "" {
			return "", "", errors.New("the host before ':' is missing")
		}
		if p == "" {
			return "", "", errors.New("the port after ':' is missing")
		}
		return h, p, nil
	default:
		// Bare IPv6, or an IPv6 CIDR: no port without brackets.
		if _, err := netip.ParseAddr(s); err == nil {
			return s, "", nil
		}
		if _, err := netip.ParsePrefix(s); err == nil {
			return s, "", nil
		}
		return "", "", errors.New("it is not an IPv6 address or CIDR (an IPv6 address with a port needs brackets: [::1]:443)")
	}
}

func parsePort(p string) (int, error) {
	if p == "" || len(p) > 5 || strings.Trim(p, "0123456789") != "" {
		return 0, fmt.Errorf("port %q is not a number from 1 to 65535", p)
	}
	n, err := strconv.Atoi(p)
	if err != nil || n < 1 || n > 65535 {
		return 0, fmt.Errorf("port %q is not a number from 1 to 65535", p)
	}
	return n, nil
}

// isIPLiteral reports whether s should be read as an IP address rather than a
// name: it contains ':' or consists of digits and dots only.
func isIPLiteral(s string) bool {
	return strings.Contains(s, ":") || strings.Trim(s, "0123456789.") == ""
}

func unmapPrefix(p netip.Prefix) netip.Prefix {
	if p.Addr().Is4In6() && p.Bits() >= 96 {
		return netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
	}
	return p
}

// normalizeName checks a DNS host name and returns it in lower case without a
// trailing dot. Labels are letters, digits, '-' and '_' (1-63 of them, not
// starting or ending with '-'); the last label is not all digits and not 0x-hex,
// so that no name can be taken for an IP address by some resolver.
func normalizeName(s string) (string, error) {
	name := strings.ToLower(strings.TrimSuffix(s, "."))
	if name == "" {
		return "", errors.New("the host name is empty")
	}
	if len(name) > 253 {
		return "", errors.New("the host name is longer than 253 characters")
	}
	labels := strings.Split(name, ".")
	for _, l := range labels {
		if l == "" {
			return "", fmt.Errorf("host name %q has an empty label", s)
		}
		if len(l) > 63 {
			return "", fmt.Errorf("host name %q has a label longer than 63 characters", s)
		}
		if l[0] == '-' || l[len(l)-1] == '-' {
			return "", fmt.Errorf("host name %q has a label that starts or ends with '-'", s)
		}
		for i := 0; i < len(l); i++ {
			c := l[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				if c >= 0x80 {
					return "", fmt.Errorf("host name %q is not ASCII: give internationalized names in their xn-- (punycode) form", s)
				}
				return "", fmt.Errorf("host name %q has the character %q, which a host name cannot have (a path or query is not part of a rule)", s, c)
			}
		}
	}
	last := labels[len(labels)-1]
	if strings.Trim(last, "0123456789") == "" || (strings.HasPrefix(last, "0x") && strings.Trim(last[2:], "0123456789abcdef") == "") {
		return "", fmt.Errorf("%q is neither a valid IP address nor a host name", s)
	}
	return name, nil
}

// ParseResolve parses one --resolve pin, NAME=IP (the IP may be in brackets). The
// name comes back normalized (lower case, no trailing dot), the IP unmapped.
// Pinning an always-denied address (link-local, cloud metadata, ...) is an error.
func ParseResolve(s string) (name string, ip netip.Addr, err error) {
	n, a, ok := strings.Cut(s, "=")
	if !ok {
		return "", netip.Addr{}, fmt.Errorf("%w %q: want NAME=IP, like git.internal=10.1.2.3", ErrBadResolve, s)
	}
	name, err = normalizeName(n)
	if err != nil {
		return "", netip.Addr{}, fmt.Errorf("%w %q: %s; want NAME=IP, like git.internal=10.1.2.3", ErrBadResolve, s, err.Error())
	}
	if strings.HasPrefix(a, "[") && strings.HasSuffix(a, "]") {
		a = a[1 : len(a)-1]
	}
	ip, err = netip.ParseAddr(a)
	if err != nil || ip.Zone() != "" {
		return "", netip.Addr{}, fmt.Errorf("%w %q: %q is not an IP address; want NAME=IP, like git.internal=10.1.2.3", ErrBadResolve, s, a)
	}
	ip = ip.Unmap()
	if class, why := classifyStatic(ip); class == classForbidden {
		return "", netip.Addr{}, fmt.Errorf("%w %q: %s is %s, which is always denied", ErrBadResolve, s, ip, why)
	}
	return name, ip, nil
}
