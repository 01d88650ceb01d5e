package main

import "testing"

// TestKeySlot: keySlot agrees with CLUSTER KEYSLOT of a cluster-enabled
// redis-server 7.0 (the values below are its replies), hash tags included.
func TestKeySlot(t *testing.T) {
	for _, tt := range []struct {
		key  string
		want int
	}{
		{"foo", 12182},
		{"somekey", 11058},
		{"foo{hash_tag}", 2515},
		{"123456789", 12739},
		{"pacer:{www.site0.com}", 871},
		{"pacer:{limiters}:live", 15602},
		{"a{}b", 13694},   // an empty tag: the whole key
		{"x{}{y}", 14166}, // the first '{' and the next '}' only
	} {
		if got := keySlot(tt.key); got != tt.want {
			t.Errorf("keySlot(%q) = %d, want %d", tt.key, got, tt.want)
		}
	}
	if got := crc16("123456789"); got != 0x31C3 {
		t.Errorf("crc16(%q) = %#x, want 0x31c3 (CRC-16/XMODEM's check value)", "123456789", got)
	}
}

// TestShardOf: the slot runs redis-cli --cluster create makes for 3
// shards (0-5460, 5461-10922, 10923-16383), and every slot on a shard.
func TestShardOf(t *testing.T) {
	for _, tt := range []struct{ slot, want int }{{0, 0}, {5460, 0}, {5461, 1}, {10922, 1}, {10923, 2}, {16383, 2}} {
		if got := shardOf(tt.slot, 3); got != tt.want {
			t.Errorf("shardOf(%d, 3) = %d, want %d", tt.slot, got, tt.want)
		}
	}
	for _, n := range []int{1, 3, 6} {
		seen := make([]int, n)
		prev := 0
		for slot := range 16384 {
			s := shardOf(slot, n)
			if s < prev || s >= n {
				t.Fatalf("shardOf(%d, %d) = %d after %d: want runs in order", slot, n, s, prev)
			}
			prev = s
			seen[s]++
		}
		for i, k := range seen {
			if k < 16384/n-1 || k > 16384/n+1 {
				t.Errorf("%d shards: shard %d holds %d slots, want about %d", n, i, k, 16384/n)
			}
		}
	}
}
