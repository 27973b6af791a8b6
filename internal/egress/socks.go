package egress

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"syscall"

	socks5 "github.com/things-go/go-socks5"
	"github.com/things-go/go-socks5/statute"
)

const socks5Version = statute.VersionSocks5

// noResolve leaves names unresolved for the connect handler, which resolves
// them under the policy.
type noResolve struct{}

func (noResolve) Resolve(ctx context.Context, _ string) (context.Context, net.IP, error) {
	return ctx, nil, nil
}

// newSOCKS is the call's SOCKS5 server (go-socks5): no authentication, CONNECT
// only, names resolved by the proxy (socks5h).
func (c *Call) newSOCKS() *socks5.Server {
	return socks5.NewServer(
		socks5.WithLogger(socks5.NewLogger(discardLog)),
		socks5.WithResolver(noResolve{}),
		socks5.WithConnectHandle(c.socksConnect),
		socks5.WithBindHandle(c.socksRefuse("BIND")),
		socks5.WithAssociateHandle(c.socksRefuse("UDP ASSOCIATE")),
	)
}

// serveSOCKS runs the SOCKS5 handshake on cc, within the read deadline handle
// set; ServeConn closes cc.
func (c *Call) serveSOCKS(cc *clientConn) {
	_ = c.socks.ServeConn(cc)
}

func socksDest(req *socks5.Request) (string, int) {
	a := req.RawDestAddr
	if a.FQDN != "" {
		return a.FQDN, a.Port
	}
	if ip, ok := netip.AddrFromSlice(a.IP); ok {
		return ip.Unmap().String(), a.Port
	}
	return "", a.Port
}

func (c *Call) socksConnect(_ context.Context, w io.Writer, req *socks5.Request) error {
	cc, ok := w.(*clientConn)
	if !ok {
		return errors.New("not a client connection")
	}
	host, port := socksDest(req)
	d := c.decide(c.ctx, host, port)
	if d.deny != nil {
		c.logDeny("socks5", d)
		return socks5.SendReply(w, statute.RepRuleFailure, nil)
	}
	up, cand, err := c.dialDecision(c.ctx, d)
	if err != nil {
		c.logAllow("socks5", d, netip.Addr{}, 0, 0, nil, err)
		rep := statute.RepHostUnreachable
		switch {
		case errors.Is(err, syscall.ECONNREFUSED):
			rep = statute.RepConnectionRefused
		case errors.Is(err, syscall.ENETUNREACH):
			rep = statute.RepNetworkUnreachable
		}
		return socks5.SendReply(w, rep, nil)
	}
	if !c.track(up) {
		return socks5.SendReply(w, statute.RepServerFailure, nil)
	}
	defer c.untrack(up)
	// The bound address is not the sandbox's business: report 0.0.0.0:0.
	if err := socks5.SendReply(w, statute.RepSuccess, &net.TCPAddr{IP: net.IPv4zero}); err != nil {
		_ = up.Close()
		return err
	}
	var pre []byte
	if br, ok := req.Reader.(*bufio.Reader); ok && br.Buffered() > 0 {
		b, _ := br.Peek(br.Buffered())
		pre = append([]byte(nil), b...)
	}
	upN, downN := c.tunnel(cc, pre, up)
	c.logAllow("socks5", d, cand.ip, upN, downN, nil, nil)
	return nil
}

func (c *Call) socksRefuse(cmd string) func(context.Context, io.Writer, *socks5.Request) error {
	return func(_ context.Context, w io.Writer, req *socks5.Request) error {
		host, port := socksDest(req)
		c.p.writeLog(&logEntry{Call: c.id, Proto: "socks5", Host: host, Port: port, Decision: "deny",
			Rule: "SOCKS5 " + cmd + " is not supported, only CONNECT"})
		return socks5.SendReply(w, statute.RepCommandNotSupported, nil)
	}
}
