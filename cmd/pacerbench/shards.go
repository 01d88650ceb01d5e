package main

import (
	"fmt"
	"math"
	"strings"

	"github.com/pacer-go/pacer/internal/layout"
	"github.com/pacer-go/pacer/reserve"
)

// The shards phase computes (it measures nothing) how a crawler's keys
// spread over a Redis Cluster's shards. Every Redis key of a pacer key
// shares one hash tag, the key itself (layout.Key: "pacer:{<key>}"), so a
// key's slot is CRC16(key) mod 16384, and the slots are cut among the
// shards in equal runs, as redis-cli --cluster create cuts them. The
// fleet's own records (the heartbeats) share the tag {limiters}: one shard
// holds them all.

// shardKeys is how many host names the phase spreads.
const shardKeys = 100_000

// shardSpread is how shardKeys keys fall on Shards shards.
type shardSpread struct {
	Shards int
	Keys   int
	Counts []int // keys per shard
	Slots  int   // distinct slots the keys use
}

// shardSpreads spreads shardKeys host names over 3 and 6 shards.
func shardSpreads() []shardSpread {
	var out []shardSpread
	for _, n := range []int{3, 6} {
		s := shardSpread{Shards: n, Keys: shardKeys, Counts: make([]int, n)}
		used := map[int]bool{}
		for i := range shardKeys {
			slot := keySlot(layout.Key(reserve.DefaultKeyPrefix, hostName(i)))
			used[slot] = true
			s.Counts[shardOf(slot, n)]++
		}
		s.Slots = len(used)
		out = append(out, s)
	}
	return out
}

// hostName is the i-th of a crawler's hosts: names of a few shapes, as a
// crawl's frontier holds them.
func hostName(i int) string {
	switch i % 4 {
	case 0:
		return fmt.Sprintf("www.site%d.com", i)
	case 1:
		return fmt.Sprintf("blog%d.example.org", i)
	case 2:
		return fmt.Sprintf("shop-%d.example.net", i)
	default:
		return fmt.Sprintf("api.service%d.io", i)
	}
}

// keySlot is the Cluster slot of a Redis key: CRC16 of its hash tag (the
// part between the first '{' and the next '}', if not empty) or of the
// whole key, mod 16384 (the Cluster specification's keyHashSlot).
func keySlot(key string) int {
	if s := strings.IndexByte(key, '{'); s >= 0 {
		if e := strings.IndexByte(key[s+1:], '}'); e > 0 {
			key = key[s+1 : s+1+e]
		}
	}
	return int(crc16(key)) % 16384
}

// crc16 is CRC-16/XMODEM (polynomial 0x1021, initial value 0), the
// Cluster specification's CRC16.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// shardOf returns the shard of n that holds slot, the slots cut in runs
// as redis-cli --cluster create cuts them: shard i ends at slot
// round((i+1) x 16384/n) - 1 (for 3 shards 0-5460, 5461-10922, 10923-16383).
func shardOf(slot, n int) int {
	per := 16384.0 / float64(n)
	for i := range n - 1 {
		if float64(slot) < math.Round(float64(i)*per+per-1)+1 {
			return i
		}
	}
	return n - 1
}

// shardsTable returns the shards phase's table, in Markdown.
func shardsTable(ss []shardSpread) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n### Keys over a Cluster's shards (computed: CRC16 of each key's hash tag, mod 16384; slots cut in equal runs)\n\n")
	fmt.Fprintf(&b, "%d host names (`www.site<i>.com`, `blog<i>.example.org`, `shop-<i>.example.net`, `api.service<i>.io`), each pacer key's hash tag its own name. "+
		"The fleet's heartbeat records share `{limiters}`: slot %d, one shard.\n\n", shardKeys, keySlot(layout.FleetKeys(reserve.DefaultKeyPrefix)[0]))
	b.WriteString("| shards | keys per shard | fewest | most | most / mean | slots used |\n|---:|---|---:|---:|---:|---:|\n")
	for _, s := range ss {
		lo, hi := s.Counts[0], s.Counts[0]
		var each []string
		for _, n := range s.Counts {
			lo, hi = min(lo, n), max(hi, n)
			each = append(each, fmt.Sprint(n))
		}
		mean := float64(s.Keys) / float64(s.Shards)
		fmt.Fprintf(&b, "| %d | %s | %d | %d | %.3f | %d of 16384 |\n", s.Shards, strings.Join(each, ", "), lo, hi, float64(hi)/mean, s.Slots)
	}
	return b.String()
}
