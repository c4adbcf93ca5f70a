package webhook

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"syscall"
)

// ErrAddressRefused is wrapped by the error of a call whose destination
// address is not public and not allowed by callback_allow.
var ErrAddressRefused = errors.New("address refused")

// refusedRange is an address block a callback may not reach unless allowed.
type refusedRange struct {
	prefix netip.Prefix
	what   string
}

// refusedRanges are the blocks that are not the public internet: calling
// them would let anyone who can push reach the server's own network or the
// cloud metadata service. IPv4-mapped IPv6 addresses are unmapped before the
// check, so ::ffff:127.0.0.1 is refused as 127.0.0.1 is.
var refusedRanges = []refusedRange{
	{netip.MustParsePrefix("0.0.0.0/8"), "unspecified (this network)"},
	{netip.MustParsePrefix("10.0.0.0/8"), "private"},
	{netip.MustParsePrefix("100.64.0.0/10"), "carrier-grade NAT (shared address space)"},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local (cloud metadata)"},
	{netip.MustParsePrefix("172.16.0.0/12"), "private"},
	{netip.MustParsePrefix("192.0.0.0/24"), "IETF protocol assignments"},
	{netip.MustParsePrefix("192.168.0.0/16"), "private"},
	{netip.MustParsePrefix("198.18.0.0/15"), "benchmarking"},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved (broadcast included)"},
	// ::/96 holds ::, ::1 and the deprecated IPv4-compatible addresses.
	{netip.MustParsePrefix("::/96"), "loopback, unspecified or IPv4-compatible"},
	{netip.MustParsePrefix("100::/64"), "discard-only"},
	{netip.MustParsePrefix("fc00::/7"), "unique local (private)"},
	{netip.MustParsePrefix("fe80::/10"), "link-local"},
	{netip.MustParsePrefix("fec0::/10"), "site-local"},
	{netip.MustParsePrefix("ff00::/8"), "multicast"},
}

// Translation prefixes carry an IPv4 address inside an IPv6 one; a NAT64 or
// 6to4 gateway would forward the call to it, so the embedded address is
// checked as well.
var (
	nat64Prefix      = netip.MustParsePrefix("64:ff9b::/96")
	nat64LocalPrefix = netip.MustParsePrefix("64:ff9b:1::/48")
	sixToFourPrefix  = netip.MustParsePrefix("2002::/16")
)

// AddressPolicy decides which destinations a callback may reach: public
// addresses always; others only when callback_allow lists their host name,
// a suffix of it, or a CIDR holding the resolved address.
type AddressPolicy struct {
	hosts    map[string]bool // exact host names, lower case
	suffixes []string        // ".internal.example": names ending with it
	prefixes []netip.Prefix  // CIDRs and single addresses
}

// NewAddressPolicy parses callback_allow entries: a host name
// ("hooks.internal.example"), a host suffix starting with a dot
// (".internal.example", which matches names under it, not the bare name),
// an IP address ("127.0.0.1", "::1") or a CIDR ("10.1.0.0/16").
func NewAddressPolicy(allow []string) (*AddressPolicy, error) {
	p := &AddressPolicy{hosts: map[string]bool{}}
	for _, raw := range allow {
		entry := strings.ToLower(strings.TrimSpace(raw))
		switch {
		case entry == "":
			continue
		case strings.Contains(entry, "/"):
			prefix, err := netip.ParsePrefix(entry)
			if err != nil {
				return nil, fmt.Errorf("callback_allow: %q is not a valid CIDR: %w", raw, err)
			}
			p.prefixes = append(p.prefixes, prefix.Masked())
		case isIPLiteral(entry):
			addr, _ := netip.ParseAddr(entry)
			p.prefixes = append(p.prefixes, netip.PrefixFrom(addr.WithZone(""), addr.BitLen()))
		case strings.HasPrefix(entry, "."):
			if !validHostName(entry[1:]) {
				return nil, fmt.Errorf("callback_allow: %q is not a valid host suffix", raw)
			}
			p.suffixes = append(p.suffixes, strings.TrimSuffix(entry, "."))
		default:
			if !validHostName(entry) {
				return nil, fmt.Errorf("callback_allow: %q is not a host name, host suffix, IP address or CIDR (no ports or wildcards)", raw)
			}
			p.hosts[strings.TrimSuffix(entry, ".")] = true
		}
	}
	return p, nil
}

func isIPLiteral(s string) bool {
	_, err := netip.ParseAddr(s)
	return err == nil
}

// validHostName accepts DNS names: labels of letters, digits, '-' and '_'
// separated by dots, an optional final dot.
func validHostName(s string) bool {
	s = strings.TrimSuffix(s, ".")
	if s == "" || len(s) > 253 {
		return false
	}
	for _, label := range strings.Split(s, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
				return false
			}
		}
	}
	return true
}

// HostAllowed reports whether callback_allow lists a URL's host name (or
// a suffix of it); such a host is called whatever it resolves to.
func (p *AddressPolicy) HostAllowed(host string) bool {
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if p.hosts[host] {
		return true
	}
	for _, suffix := range p.suffixes {
		if strings.HasSuffix(host, suffix) {
			return true
		}
	}
	return false
}

// CheckIP returns nil when a resolved address may be called, or an error
// wrapping ErrAddressRefused that says why not.
func (p *AddressPolicy) CheckIP(addr netip.Addr) error {
	addr = addr.WithZone("")
	for _, prefix := range p.prefixes {
		if prefix.Contains(addr) || prefix.Contains(addr.Unmap()) {
			return nil
		}
	}
	if what := nonPublic(addr); what != "" {
		return fmt.Errorf("%w: %s is %s; list it in callback_allow to permit it", ErrAddressRefused, addr, what)
	}
	return nil
}

// nonPublic names the refused range holding addr, or returns "".
func nonPublic(addr netip.Addr) string {
	addr = addr.Unmap()
	for _, r := range refusedRanges {
		if r.prefix.Contains(addr) {
			return r.what
		}
	}
	if addr.Is6() {
		b := addr.As16()
		var embedded netip.Addr
		switch {
		case nat64Prefix.Contains(addr), nat64LocalPrefix.Contains(addr):
			embedded = netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})
		case sixToFourPrefix.Contains(addr):
			embedded = netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]})
		}
		if embedded.IsValid() {
			if what := nonPublic(embedded); what != "" {
				return what + " (embedded in a translated IPv6 address)"
			}
		}
	}
	return ""
}

// dialControl is a net.Dialer Control function: it runs for every
// connection attempt, after DNS resolution, with the IP address about to be
// connected to, so a name that resolves (or re-resolves) to a refused
// address is caught whatever the URL said.
func (p *AddressPolicy) dialControl(network, address string, _ syscall.RawConn) error {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return fmt.Errorf("%w: unexpected dial address %q", ErrAddressRefused, address)
	}
	addr, err := netip.ParseAddr(host)
	if err != nil {
		return fmt.Errorf("%w: dial address %q is not an IP address", ErrAddressRefused, address)
	}
	return p.CheckIP(addr)
}
