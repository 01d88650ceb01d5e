package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// prefixScanLimit bounds the keys a "no key matches" hint scans.
const prefixScanLimit = 100_000

// prefixSeen is a key prefix found in Redis and how many of its keys the
// scan saw.
type prefixSeen struct {
	prefix string
	keys   int
}

// prefixes returns the prefixes of the keys in Redis laid out as pacer
// lays them out (prefix + "{" + key + "}" + suffix), most keys first: the
// text before a key's first '{'. It scans at most prefixScanLimit keys;
// more is true if it stopped there.
func (c *cli) prefixes(ctx context.Context) (seen []prefixSeen, more bool, err error) {
	count := map[string]int{}
	n := 0
	it := c.rdb.Scan(ctx, 0, "*{*}*", 1000).Iterator()
	for it.Next(ctx) {
		if n++; n > prefixScanLimit {
			more = true
			break
		}
		k := it.Val()
		if i := strings.IndexByte(k, '{'); i >= 0 {
			count[k[:i]]++
		}
	}
	if err := it.Err(); err != nil {
		return nil, false, fmt.Errorf("scanning for key prefixes: Redis at %s failed: %v", c.addr, err)
	}
	for p, k := range count {
		seen = append(seen, prefixSeen{p, k})
	}
	slices.SortFunc(seen, func(a, b prefixSeen) int {
		if a.keys != b.keys {
			return b.keys - a.keys
		}
		return strings.Compare(a.prefix, b.prefix)
	})
	return seen, more, nil
}

// noMatch is status's error for a pattern that matches no key, or an
// unknown key (lead says which): it names the prefixes Redis holds keys
// under, since a wrong -prefix is the usual cause.
func (c *cli) noMatch(ctx context.Context, lead string) error {
	seen, more, err := c.prefixes(ctx)
	if err != nil {
		return err
	}
	var b strings.Builder
	b.WriteString(lead)
	switch {
	case len(seen) == 0:
		b.WriteString("; this Redis holds no keys laid out as pacer's")
	default:
		b.WriteString("; this Redis holds pacer-like keys under -prefix")
		for i, p := range seen {
			if i == 10 {
				fmt.Fprintf(&b, " and %d more", len(seen)-i)
				break
			}
			fmt.Fprintf(&b, " %q (%d keys)", clean(p.prefix), p.keys)
		}
		if more {
			fmt.Fprintf(&b, " (in the first %d keys)", prefixScanLimit)
		}
	}
	return errors.New(b.String())
}
