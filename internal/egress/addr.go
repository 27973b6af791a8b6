package egress

import (
	"net/netip"
)

type addrClass uint8

const (
	classPublic    addrClass = iota
	classPrivate             // loopback, private ranges, this host's own addresses: needs a literal rule or a pin
	classForbidden           // always denied, whatever the rules
)

type rangeInfo struct {
	p   netip.Prefix
	why string
}

func mustRanges(pairs ...string) []rangeInfo {
	out := make([]rangeInfo, 0, len(pairs)/2)
	for i := 0; i < len(pairs); i += 2 {
		out = append(out, rangeInfo{netip.MustParsePrefix(pairs[i]), pairs[i+1]})
	}
	return out
}

// forbiddenRanges are always denied: no rule, pin or CIDR can allow them.
var forbiddenRanges = mustRanges(
	"169.254.0.0/16", "link-local (cloud metadata services live at 169.254.169.254)",
	"fe80::/10", "IPv6 link-local",
	"fd00:ec2::254/128", "a cloud metadata address (AWS IPv6)",
	"100.100.100.200/32", "a cloud metadata address (Alibaba Cloud)",
	"0.0.0.0/8", "'this network' (0.0.0.0 reaches this host)",
	"::/128", "the unspecified address (reaches this host)",
	"224.0.0.0/4", "multicast",
	"ff00::/8", "IPv6 multicast",
	"240.0.0.0/4", "reserved or broadcast",
)

// privateRanges are denied unless a rule names the address or a CIDR holding it
// literally, or the name was pinned with --resolve.
var privateRanges = mustRanges(
	"127.0.0.0/8", "loopback",
	"::1/128", "loopback",
	"10.0.0.0/8", "a private address",
	"172.16.0.0/12", "a private address",
	"192.168.0.0/16", "a private address",
	"100.64.0.0/10", "a shared (carrier-grade NAT) address",
	"192.0.0.0/24", "an IETF special-purpose address",
	"198.18.0.0/15", "a benchmarking network address",
	"fc00::/7", "an IPv6 unique-local (private) address",
	"fec0::/10", "an IPv6 site-local address",
)

var (
	nat64Prefix = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour   = netip.MustParsePrefix("2002::/16")
)

// classifyStatic classifies an address by the fixed ranges alone. IPv4-mapped
// IPv6 addresses are unmapped first; IPv4 addresses embedded in NAT64, 6to4 and
// IPv4-compatible IPv6 addresses are classified too, and the stricter class wins.
func classifyStatic(ip netip.Addr) (addrClass, string) {
	ip = ip.Unmap()
	class, why := classifyOne(ip)
	if ip.Is6() {
		b := ip.As16()
		var embedded netip.Addr
		switch {
		case nat64Prefix.Contains(ip):
			embedded = netip.AddrFrom4([4]byte(b[12:16]))
		case sixToFour.Contains(ip):
			embedded = netip.AddrFrom4([4]byte(b[2:6]))
		case ip != netip.IPv6Loopback() && ip != netip.IPv6Unspecified() && [12]byte(b[:12]) == [12]byte{}:
			return classForbidden, "an IPv4-compatible IPv6 address"
		}
		if embedded.IsValid() {
			if c, w := classifyOne(embedded); c > class {
				class, why = c, w+" (embedded in "+ip.String()+")"
			}
		}
	}
	return class, why
}

func classifyOne(ip netip.Addr) (addrClass, string) {
	for _, r := range forbiddenRanges {
		if r.p.Contains(ip) {
			return classForbidden, r.why
		}
	}
	for _, r := range privateRanges {
		if r.p.Contains(ip) {
			return classPrivate, r.why
		}
	}
	return classPublic, ""
}

// deniedPrefix reports whether every address of p is always denied, and why.
func deniedPrefix(p netip.Prefix) (string, bool) {
	for _, r := range forbiddenRanges {
		if r.p.Bits() <= p.Bits() && r.p.Contains(p.Addr()) {
			return r.p.String() + " (" + r.why + ")", true
		}
	}
	return "", false
}
