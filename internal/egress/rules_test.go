package egress

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
)

func TestParseRule(t *testing.T) {
	good := []struct{ in, canon string }{
		{"example.com", "example.com"},
		{"Example.COM.", "example.com"},
		{"*.example.com", "*.example.com"},
		{"example.com:8443", "example.com:8443"},
		{"*.example.com:22", "*.example.com:22"},
		{"git_host.internal", "git_host.internal"},
		{"localhost", "localhost"},
		{"1.2.3.4", "1.2.3.4"},
		{"1.2.3.4:22", "1.2.3.4:22"},
		{"::1", "::1"},
		{"[::1]:443", "[::1]:443"},
		{"[2001:db8::1]", "2001:db8::1"},
		{"::ffff:10.1.2.3", "10.1.2.3"},
		{"10.0.0.0/8", "10.0.0.0/8"},
		{"10.1.2.3/8", "10.0.0.0/8"},
		{"10.0.0.0/8:22", "10.0.0.0/8:22"},
		{"fd00::/8", "fd00::/8"},
		{"[fd00::/8]:22", "[fd00::/8]:22"},
		{"::ffff:10.0.0.0/104", "10.0.0.0/8"},
		{"0.0.0.0/0", "0.0.0.0/0"},
		{"::/0", "::/0"},
		{"xn--bcher-kva.example", "xn--bcher-kva.example"},
		{"host:65535", "host:65535"},
	}
	for _, tc := range good {
		r, err := ParseRule(tc.in)
		if err != nil {
			t.Errorf("ParseRule(%q): %v", tc.in, err)
			continue
		}
		if r.String() != tc.canon {
			t.Errorf("ParseRule(%q).String() = %q, want %q", tc.in, r.String(), tc.canon)
		}
		// The canonical form parses to itself.
		if r2, err := ParseRule(r.String()); err != nil || r2 != r {
			t.Errorf("ParseRule(%q) = %v, %v; want the rule back", r.String(), r2, err)
		}
	}
	bad := []struct{ in, why string }{
		{"", "empty"},
		{"https://example.com", "URL"},
		{"example.com/path", "path"},
		{"example.com:443/x", "port"},
		{"*", "wildcard"},
		{"a.*.com", "wildcard"},
		{"*example.com", "wildcard"},
		{"*.", "empty"},
		{"ex ample.com", "white space"},
		{" example.com", "white space"},
		{"example.com\n", "white space"},
		{"example.com:0", "port"},
		{"example.com:65536", "port"},
		{"example.com:http", "port"},
		{"example.com:+80", "port"},
		{"example.com:", "port"},
		{":80", "host"},
		{"1.2.3", "IP"},
		{"1.2.3.4.5", "IP"},
		{"example.123", "neither"},
		{"foo.0x7f", "neither"},
		{"-bad.example", "'-'"},
		{"a..b", "empty label"},
		{"bücher.example", "punycode"},
		{"2001:db8:1:2:3:4:5:6:443", "brackets"},
		{"[::1", "']'"},
		{"[::1]443", "]"},
		{"[1.2.3.4]:80", "brackets"},
		{"fe80::1%eth0", "zone"},
		{"169.254.169.254", "always denied"},
		{"169.254.0.0/16", "always denied"},
		{"::ffff:169.254.169.254", "always denied"},
		{"fd00:ec2::254", "always denied"},
		{"0.0.0.0", "always denied"},
		{"224.0.0.1", "always denied"},
		{"10.0.0.0/33", "CIDR"},
		{"user@example.com", "character"},
	}
	for _, tc := range bad {
		_, err := ParseRule(tc.in)
		if err == nil {
			t.Errorf("ParseRule(%q) succeeded; want an error about %s", tc.in, tc.why)
			continue
		}
		if !errors.Is(err, ErrBadRule) {
			t.Errorf("ParseRule(%q) error %v does not wrap ErrBadRule", tc.in, err)
		}
		if !strings.Contains(err.Error(), tc.why) || !strings.Contains(err.Error(), "accepted forms") {
			t.Errorf("ParseRule(%q) error %q: want it to mention %q and the accepted forms", tc.in, err, tc.why)
		}
	}
}

func mustRule(t testing.TB, s string) Rule {
	t.Helper()
	r, err := ParseRule(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestRuleMatch(t *testing.T) {
	cases := []struct {
		rule string
		host string // a name, or "" for an address match
		ip   string
		port int
		want bool
	}{
		{"example.com", "example.com", "", 443, true},
		{"example.com", "example.com", "", 80, true},
		{"example.com", "example.com", "", 8080, false},
		{"example.com", "www.example.com", "", 443, false},
		{"example.com", "badexample.com", "", 443, false},
		{"*.example.com", "www.example.com", "", 443, true},
		{"*.example.com", "a.b.example.com", "", 80, true},
		{"*.example.com", "example.com", "", 443, false},
		{"*.example.com", "wwwexample.com", "", 443, false},
		{"*.example.com", "example.com.evil.net", "", 443, false},
		{"example.com:22", "example.com", "", 22, true},
		{"example.com:22", "example.com", "", 443, false},
		{"1.2.3.4", "", "1.2.3.4", 443, true},
		{"1.2.3.4", "", "1.2.3.5", 443, false},
		{"1.2.3.4:22", "", "1.2.3.4", 22, true},
		{"1.2.3.4:22", "", "1.2.3.4", 80, false},
		{"10.0.0.0/8", "", "10.200.1.1", 80, true},
		{"10.0.0.0/8", "", "11.0.0.1", 80, false},
		{"10.0.0.0/8:22", "", "10.0.0.1", 22, true},
		{"10.0.0.0/8:22", "", "10.0.0.1", 443, false},
		{"[fd00::/8]:22", "", "fd12::1", 22, true},
		{"::1", "", "::1", 443, true},
		{"example.com", "", "1.2.3.4", 443, false}, // a name rule never matches an address
		{"1.2.3.4", "1.2.3.4", "", 443, false},     // nor an address rule a name
	}
	for _, tc := range cases {
		r := mustRule(t, tc.rule)
		var got bool
		if tc.host != "" {
			got = r.matchName(tc.host, tc.port)
		} else {
			got = r.matchIP(netip.MustParseAddr(tc.ip).Unmap(), tc.port)
		}
		if got != tc.want {
			t.Errorf("rule %q vs %q%s port %d: got %v, want %v", tc.rule, tc.host, tc.ip, tc.port, got, tc.want)
		}
	}
}

func TestClassify(t *testing.T) {
	cases := []struct {
		ip   string
		want addrClass
	}{
		{"169.254.169.254", classForbidden},
		{"::ffff:169.254.169.254", classForbidden},
		{"64:ff9b::a9fe:a9fe", classForbidden}, // NAT64 of 169.254.169.254
		{"2002:a9fe:a9fe::1", classForbidden},  // 6to4 of 169.254.169.254
		{"::a9fe:a9fe", classForbidden},        // IPv4-compatible
		{"fe80::1", classForbidden},
		{"fd00:ec2::254", classForbidden},
		{"100.100.100.200", classForbidden},
		{"0.0.0.0", classForbidden},
		{"0.1.2.3", classForbidden},
		{"::", classForbidden},
		{"224.0.0.251", classForbidden},
		{"ff02::1", classForbidden},
		{"255.255.255.255", classForbidden},
		{"127.0.0.1", classPrivate},
		{"127.8.9.10", classPrivate},
		{"::1", classPrivate},
		{"::ffff:127.0.0.1", classPrivate},
		{"64:ff9b::7f00:1", classPrivate},
		{"10.1.2.3", classPrivate},
		{"172.16.0.1", classPrivate},
		{"172.31.255.255", classPrivate},
		{"192.168.1.1", classPrivate},
		{"100.64.0.1", classPrivate},
		{"fc00::1", classPrivate},
		{"fd12:3456::1", classPrivate},
		{"172.32.0.1", classPublic},
		{"8.8.8.8", classPublic},
		{"2001:4860:4860::8888", classPublic},
	}
	for _, tc := range cases {
		got, why := classifyStatic(netip.MustParseAddr(tc.ip))
		if got != tc.want {
			t.Errorf("classify(%s) = %d (%s), want %d", tc.ip, got, why, tc.want)
		}
		if got != classPublic && why == "" {
			t.Errorf("classify(%s): no reason given", tc.ip)
		}
	}
}

func TestParseResolve(t *testing.T) {
	name, ip, err := ParseResolve("Git.Internal.=10.1.2.3")
	if err != nil || name != "git.internal" || ip != netip.MustParseAddr("10.1.2.3") {
		t.Fatalf("ParseResolve = %q %v %v", name, ip, err)
	}
	if _, ip, err := ParseResolve("h=[::1]"); err != nil || ip != netip.IPv6Loopback() {
		t.Fatalf("ParseResolve(h=[::1]) = %v %v", ip, err)
	}
	if _, ip, err := ParseResolve("h=::ffff:127.0.0.1"); err != nil || ip != netip.MustParseAddr("127.0.0.1") {
		t.Fatalf("ParseResolve(h=::ffff:127.0.0.1) = %v %v, want it unmapped", ip, err)
	}
	for _, s := range []string{"", "host", "host=", "=1.2.3.4", "host=nope", "*.x=1.2.3.4", "h=169.254.169.254", "h=::ffff:169.254.169.254", "h=fe80::1%eth0"} {
		if _, _, err := ParseResolve(s); !errors.Is(err, ErrBadResolve) {
			t.Errorf("ParseResolve(%q) = %v, want an error wrapping ErrBadResolve", s, err)
		}
	}
}

func TestParseCredential(t *testing.T) {
	const secret = "Bearer s3cr3t-value"
	env := map[string]string{"TOKEN": secret, "EMPTY": "", "CRLF": "a\r\nX-Evil: 1", "SPACE": " x"}
	getenv := func(k string) string { return env[k] }
	c, err := ParseCredential("API.example.com=authorization:env:TOKEN", getenv)
	if err != nil {
		t.Fatal(err)
	}
	if c.Host != "api.example.com" || c.Header != "Authorization" || c.Var != "TOKEN" || c.value != secret {
		t.Fatalf("ParseCredential = %+v", c)
	}
	for _, s := range []string{fmt.Sprint(c), fmt.Sprintf("%v %+v %#v %s %q %x", c, c, c, c, c, c), fmt.Sprintf("%v %+v", []Credential{c}, &c)} {
		if strings.Contains(s, "s3cr3t") || strings.Contains(s, fmt.Sprintf("%x", "s3cr3t")) {
			t.Errorf("formatting a credential shows its value: %s", s)
		}
	}
	if got := c.String(); got != "api.example.com=Authorization:env:TOKEN" {
		t.Errorf("String() = %q", got)
	}
	bad := []struct{ in, why string }{
		{"example.com", "no '='"},
		{"example.com=Authorization", "':'"},
		{"example.com=Authorization:TOKEN", "env:VAR"},
		{"example.com=Authorization:env:", "environment variable name"},
		{"example.com=Authorization:env:1X", "environment variable name"},
		{"example.com=Authorization:env:MISSING", "MISSING is unset or empty"},
		{"example.com=Authorization:env:EMPTY", "EMPTY is unset or empty"},
		{"example.com=Authorization:env:CRLF", "cannot be sent"},
		{"example.com=Authorization:env:SPACE", "cannot be sent"},
		{"example.com=Bad Header:env:TOKEN", "header name"},
		{"example.com=Host:env:TOKEN", "Host header"},
		{"example.com=Proxy-Authorization:env:TOKEN", "Proxy-Authorization"},
		{"example.com:443=Authorization:env:TOKEN", "plain host name"},
		{"*.example.com=Authorization:env:TOKEN", "plain host name"},
		{"1.2.3.4=Authorization:env:TOKEN", "plain host name"},
		{"=Authorization:env:TOKEN", "plain host name"},
	}
	for _, tc := range bad {
		_, err := ParseCredential(tc.in, getenv)
		if !errors.Is(err, ErrBadCredential) {
			t.Errorf("ParseCredential(%q) = %v, want an error wrapping ErrBadCredential", tc.in, err)
			continue
		}
		if !strings.Contains(err.Error(), tc.why) {
			t.Errorf("ParseCredential(%q) error %q: want it to mention %q", tc.in, err, tc.why)
		}
		if strings.Contains(err.Error(), "s3cr3t") || strings.Contains(err.Error(), "X-Evil") {
			t.Errorf("ParseCredential(%q) error shows the value: %q", tc.in, err)
		}
	}
}

func FuzzParseRule(f *testing.F) {
	for _, s := range []string{"example.com", "*.example.com:22", "[::1]:443", "10.0.0.0/8:22", "[fd00::/8]:22",
		"::ffff:1.2.3.4", "a.*.b", "https://x/", "1.2.3", "[", "]:", "::/0", "0x7f.1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRule(s)
		if err != nil {
			if !errors.Is(err, ErrBadRule) {
				t.Fatalf("ParseRule(%q) error %v does not wrap ErrBadRule", s, err)
			}
			return
		}
		// A rule that parses prints a canonical form that parses back to it.
		r2, err := ParseRule(r.String())
		if err != nil || r2 != r {
			t.Fatalf("ParseRule(%q) = %q, which parses to %v, %v", s, r.String(), r2, err)
		}
		if strings.ContainsAny(r.String(), " /\t\n") && r.kind != kindPrefix {
			t.Fatalf("ParseRule(%q) = %q: a space or slash in a non-CIDR rule", s, r.String())
		}
	})
}
