package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// denial is a refused destination. Its Error is the text the client sees.
type denial struct {
	msg    string // for the client: names the destination and the option that would allow it
	reason string // for the log's "rule" field
	ip     netip.Addr
}

func (d *denial) Error() string { return d.msg }

// candidate is an address the policy allows, with the rule that allows it.
type candidate struct {
	ip   netip.Addr
	rule string
}

// decision is the outcome of the policy for one destination.
type decision struct {
	host  string // normalized name, or the IP literal as written by netip
	port  int
	dest  string // host:port, IPv6 in brackets
	cands []candidate
	deny  *denial
	err   error // a rule matched the name, but it did not resolve
}

// rule is the rule of the first candidate ("" when denied).
func (d *decision) rule() string {
	if len(d.cands) == 0 {
		return ""
	}
	return d.cands[0].rule
}

// splitHostPort splits a request's host:port, defaulting the port (0: required).
func splitHostPort(hostport string, defPort int) (string, int, error) {
	host, port := hostport, ""
	if h, p, err := net.SplitHostPort(hostport); err == nil {
		host, port = h, p
	} else if strings.HasPrefix(hostport, "[") && strings.HasSuffix(hostport, "]") {
		host = hostport[1 : len(hostport)-1]
	}
	if port == "" {
		if defPort == 0 {
			return "", 0, fmt.Errorf("%q has no port", hostport)
		}
		return host, defPort, nil
	}
	n, err := parsePort(port)
	if err != nil {
		return "", 0, err
	}
	return host, n, nil
}

// decide applies the policy to a destination: it resolves the host (pins first;
// DNS only when a rule could match) and checks every address it would connect
// to. The addresses it returns are the only ones dial may use.
func (c *Call) decide(ctx context.Context, rawHost string, port int) *decision {
	p := c.p
	d := &decision{port: port}
	var ip netip.Addr
	isIP := false
	if a, err := netip.ParseAddr(rawHost); err == nil {
		if a.Zone() != "" {
			d.host, d.dest = rawHost, net.JoinHostPort(rawHost, strconv.Itoa(port))
			d.deny = &denial{
				msg:    fmt.Sprintf("sandbash: egress to %s denied: an IPv6 zone cannot be used", d.dest),
				reason: "bad destination: IPv6 zone",
			}
			return d
		}
		ip, isIP = a.Unmap(), true
		d.host = ip.String()
	} else {
		name, err := normalizeName(rawHost)
		if err != nil {
			d.host, d.dest = rawHost, net.JoinHostPort(rawHost, strconv.Itoa(port))
			d.deny = &denial{
				msg:    fmt.Sprintf("sandbash: egress to %s denied: %s", d.dest, err.Error()),
				reason: "bad destination: " + err.Error(),
			}
			return d
		}
		d.host = name
	}
	d.dest = net.JoinHostPort(d.host, strconv.Itoa(port))
	if port < 1 || port > 65535 {
		d.deny = &denial{msg: fmt.Sprintf("sandbash: egress to %s denied: bad port", d.dest), reason: "bad destination: port"}
		return d
	}

	var addrs []netip.Addr
	pinned := false
	switch {
	case isIP:
		addrs = []netip.Addr{ip}
	default:
		if a, ok := p.pins[d.host]; ok {
			addrs, pinned = []netip.Addr{a}, true
			break
		}
		if !p.couldMatchName(d.host, port) {
			d.deny = c.noRule(d, netip.Addr{})
			return d
		}
		rctx, cancel := context.WithTimeout(ctx, p.pol.DialTimeout)
		res, err := p.resolver.LookupNetIP(rctx, "ip", d.host)
		cancel()
		if err != nil || len(res) == 0 {
			if !p.nameAllowed(d.host, port) {
				d.deny = c.noRule(d, netip.Addr{})
				return d
			}
			if err == nil {
				err = errors.New("no addresses")
			}
			d.err = fmt.Errorf("sandbash: egress to %s failed: cannot resolve %s: %w", d.dest, d.host, err)
			return d
		}
		for _, a := range res {
			addrs = append(addrs, a.Unmap())
		}
	}

	var worst *denial
	worse := func(x *denial, rank int, cur *int) {
		if rank > *cur {
			worst, *cur = x, rank
		}
	}
	rank := -1
	for _, a := range addrs {
		class, why := p.classify(a)
		if class == classForbidden {
			msg := fmt.Sprintf("sandbash: egress to %s denied: %s is %s; it is always denied and no rule can allow it", d.dest, a, why)
			if !isIP {
				msg = fmt.Sprintf("sandbash: egress to %s denied: %s resolves to %s, %s; it is always denied and no rule can allow it", d.dest, d.host, a, why)
			}
			worse(&denial{msg: msg, reason: "always denied: " + why, ip: a}, 3, &rank)
			continue
		}
		var nameRule, ipRule string
		for _, r := range p.rules {
			if nameRule == "" && !isIP && r.matchName(d.host, port) {
				nameRule = r.String()
			}
			if ipRule == "" && r.matchIP(a, port) {
				ipRule = r.String()
			}
		}
		switch {
		case class == classPrivate && ipRule != "":
			d.cands = append(d.cands, candidate{a, ipRule})
		case class == classPrivate && nameRule != "" && pinned:
			d.cands = append(d.cands, candidate{a, nameRule})
		case class == classPrivate && nameRule != "":
			msg := fmt.Sprintf("sandbash: egress to %s denied: %s resolves to %s, %s, which a rule for a name does not allow "+
				"(add --allow %s, or pin the name with --resolve %s=%s)", d.dest, d.host, a, why, suggest(a.String(), port), d.host, a)
			worse(&denial{msg: msg, reason: "private address: " + why, ip: a}, 2, &rank)
		case class == classPublic && nameRule != "":
			d.cands = append(d.cands, candidate{a, nameRule})
		case class == classPublic && ipRule != "":
			d.cands = append(d.cands, candidate{a, ipRule})
		default:
			worse(c.noRule(d, a), 1, &rank)
		}
	}
	if len(d.cands) == 0 {
		d.deny = worst
	}
	return d
}

// couldMatchName reports whether a rule could allow host:port, before it is
// resolved: only a name rule for it. An address rule never makes the proxy
// look a name up: were any name resolved to see whether it lands in a range,
// a call could have the host's resolver ask outside DNS servers names it made
// up, a channel out past every rule. An address rule allows IP literals, and
// names pinned with --resolve.
func (p *Proxy) couldMatchName(host string, port int) bool {
	return p.nameAllowed(host, port)
}

func (c *Call) noRule(d *decision, ip netip.Addr) *denial {
	return &denial{
		msg:    fmt.Sprintf("sandbash: egress to %s denied: no --allow rule matches (add --allow %s)", d.dest, suggest(d.host, d.port)),
		reason: "no matching allow rule",
		ip:     ip,
	}
}

// suggest is the --allow argument that would allow host on port.
func suggest(host string, port int) string {
	if port == 80 || port == 443 {
		return host
	}
	if strings.Contains(host, ":") {
		return "[" + host + "]:" + strconv.Itoa(port)
	}
	return host + ":" + strconv.Itoa(port)
}

// dialDecision connects to the first allowed candidate that answers. It dials
// IP:port only, so nothing re-resolves the name.
func (c *Call) dialDecision(ctx context.Context, d *decision) (net.Conn, candidate, error) {
	if d.deny != nil {
		return nil, candidate{}, d.deny
	}
	if d.err != nil {
		return nil, candidate{}, d.err
	}
	ctx, cancel := context.WithTimeout(ctx, c.p.pol.DialTimeout)
	defer cancel()
	stop := context.AfterFunc(c.ctx, cancel)
	defer stop()
	var errs []error
	for _, cand := range d.cands {
		conn, err := c.p.dial(ctx, "tcp", netip.AddrPortFrom(cand.ip, uint16(d.port)).String())
		if err == nil {
			return conn, cand, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, candidate{}, fmt.Errorf("sandbash: egress to %s failed: %w", d.dest, errors.Join(errs...))
}
