package redisconn

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gomodule/redigo/redis"
)

// slotMap says which primary serves each slot. It is never changed once
// published: a change builds a new one (see Client.noteMoved).
type slotMap struct {
	// owner holds an index into primaries, or -1 when no primary is known
	// for the slot.
	owner     [SlotCount]int16
	primaries []string
	// replicas are known nodes too, asked for the map when the seeds and
	// the primaries do not answer.
	replicas []string
}

func emptySlotMap() *slotMap {
	m := &slotMap{}
	for i := range m.owner {
		m.owner[i] = -1
	}
	return m
}

// addr returns the primary serving slot, or "".
func (m *slotMap) addr(slot int) string {
	if i := m.owner[slot]; i >= 0 {
		return m.primaries[i]
	}
	return ""
}

// covered counts the slots with a known primary.
func (m *slotMap) covered() int {
	n := 0
	for _, i := range m.owner {
		if i >= 0 {
			n++
		}
	}
	return n
}

// serving returns the primaries that serve at least one slot, sorted.
func (m *slotMap) serving() []string {
	used := make([]bool, len(m.primaries))
	for _, i := range m.owner {
		if i >= 0 {
			used[i] = true
		}
	}
	var addrs []string
	for i, addr := range m.primaries {
		if used[i] {
			addrs = append(addrs, addr)
		}
	}
	slices.Sort(addrs)
	return addrs
}

// withOwner returns a copy of m in which addr serves slot.
func (m *slotMap) withOwner(slot int, addr string) *slotMap {
	n := &slotMap{owner: m.owner, primaries: slices.Clone(m.primaries), replicas: m.replicas}
	n.setOwner(slot, addr)
	return n
}

// setOwner makes addr serve slot in m, which must not be published yet.
func (m *slotMap) setOwner(slot int, addr string) {
	m.owner[slot] = m.primaryIndex(addr)
}

// primaryIndex is addr's index in m.primaries, where it is added when
// missing (m must not be published yet).
func (m *slotMap) primaryIndex(addr string) int16 {
	i := slices.Index(m.primaries, addr)
	if i < 0 {
		i = len(m.primaries)
		m.primaries = append(m.primaries, addr)
	}
	return int16(i)
}

// parseClusterSlots builds a map from a CLUSTER SLOTS reply: one entry per
// range, [start, end, primary, replica...], each node [host, port, id,
// ...]. from is the node that answered: an empty or NULL host means its
// host; "?" (an endpoint the node does not know) leaves the range without a
// primary.
func parseClusterSlots(reply any, from string) (*slotMap, error) {
	ranges, err := redis.Values(reply, nil)
	if err != nil {
		return nil, fmt.Errorf("CLUSTER SLOTS: %w", err)
	}
	fromHost, _, _ := net.SplitHostPort(from)
	m := emptySlotMap()
	nodeAddr := func(node any) (string, error) {
		fields, err := redis.Values(node, nil)
		if err != nil || len(fields) < 2 {
			return "", fmt.Errorf("CLUSTER SLOTS: a node is not [host, port, ...]: %v", node)
		}
		host, err := redis.String(fields[0], nil)
		if err != nil && !errors.Is(err, redis.ErrNil) {
			return "", fmt.Errorf("CLUSTER SLOTS: node host: %w", err)
		}
		port, err := redis.Int(fields[1], nil)
		if err != nil {
			return "", fmt.Errorf("CLUSTER SLOTS: node port: %w", err)
		}
		switch host {
		case "?":
			return "", nil
		case "":
			host = fromHost
		}
		return net.JoinHostPort(host, strconv.Itoa(port)), nil
	}
	for _, r := range ranges {
		entry, err := redis.Values(r, nil)
		if err != nil || len(entry) < 3 {
			return nil, fmt.Errorf("CLUSTER SLOTS: a range is not [start, end, primary, ...]: %v", r)
		}
		start, err1 := redis.Int(entry[0], nil)
		end, err2 := redis.Int(entry[1], nil)
		if err1 != nil || err2 != nil || start < 0 || end >= SlotCount || start > end {
			return nil, fmt.Errorf("CLUSTER SLOTS: bad slot range %v-%v", entry[0], entry[1])
		}
		primary, err := nodeAddr(entry[2])
		if err != nil {
			return nil, err
		}
		for _, replica := range entry[3:] {
			addr, err := nodeAddr(replica)
			if err != nil {
				return nil, err
			}
			if addr != "" && !slices.Contains(m.replicas, addr) {
				m.replicas = append(m.replicas, addr)
			}
		}
		if primary == "" {
			continue
		}
		i := m.primaryIndex(primary)
		for s := start; s <= end; s++ {
			m.owner[s] = i
		}
	}
	return m, nil
}

// maxMapQueryTimeout caps the connect and reply time allowed to one node
// asked for the slot map, so that a dead node does not hold a refresh long.
const maxMapQueryTimeout = 2 * time.Second

// fetchSlotMap asks the nodes of the current map (its primaries, then its
// replicas), then the seeds, for the slot map, and returns the first that
// covers every slot; when none does (a failover under way), the one
// covering most. The current nodes come first: they answered a moment
// ago, while a seed may have left the cluster or died long since, and an
// unreachable one costs up to maxMapQueryTimeout. The first fetch has only
// the seeds.
func (c *Client) fetchSlotMap(ctx context.Context) (*slotMap, error) {
	current := c.slots.Load()
	var candidates []string
	for _, addr := range slices.Concat(current.primaries, current.replicas, c.opts.ClusterAddrs) {
		if !slices.Contains(candidates, addr) {
			candidates = append(candidates, addr)
		}
	}
	var best *slotMap
	var problems []string
	for _, addr := range candidates {
		if ctx.Err() != nil {
			break
		}
		m, err := c.askSlots(ctx, addr)
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		if m.covered() == SlotCount {
			return m, nil
		}
		if best == nil || m.covered() > best.covered() {
			best = m
		}
	}
	if best != nil && best.covered() > 0 {
		return best, nil
	}
	if len(problems) == 0 {
		problems = append(problems, "no node serves any slot")
	}
	if err := ctx.Err(); err != nil {
		problems = append(problems, err.Error())
	}
	return nil, fmt.Errorf("no cluster node gave the slot map: %s", strings.Join(problems, "; "))
}

// askSlots asks the node at addr for CLUSTER SLOTS on a connection of its
// own, with the options' credentials and TLS settings.
func (c *Client) askSlots(ctx context.Context, addr string) (*slotMap, error) {
	o := c.opts
	timeout := o.ConnectTimeout
	if timeout <= 0 || timeout > maxMapQueryTimeout {
		timeout = maxMapQueryTimeout
	}
	o.ConnectTimeout, o.ReadTimeout, o.WriteTimeout = timeout, timeout, timeout
	conn, err := o.dialServer(addr)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	reply, err := redis.DoContext(conn, ctx, "CLUSTER", "SLOTS")
	if err != nil {
		return nil, o.tlsHint(fmt.Errorf("CLUSTER SLOTS at %s: %w", addr, err))
	}
	return parseClusterSlots(reply, addr)
}
