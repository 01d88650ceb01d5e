package luastore

import (
	"cmp"
	"slices"
)

// zset is a sorted set: members ordered by score, then by member (byte
// order), as Redis orders them. It is a sorted slice: O(log n) to find,
// O(n) to insert or remove, which suits the small sets of a local
// fallback.
type zset struct {
	items  []zitem
	scores map[string]float64
}

type zitem struct {
	score  float64
	member string
}

func newZSet() *zset { return &zset{scores: map[string]float64{}} }

func (z *zset) len() int { return len(z.items) }

func compareItems(a, b zitem) int {
	if a.score != b.score {
		return cmp.Compare(a.score, b.score)
	}
	return cmp.Compare(a.member, b.member)
}

// add sets member's score, adding it if new; it reports whether it was
// added.
func (z *zset) add(member string, score float64) bool {
	if score == 0 {
		// A small Redis sorted set (a listpack) stores -0 as 0.
		score = 0
	}
	old, ok := z.scores[member]
	if ok {
		if old == score {
			return false
		}
		z.removeItem(zitem{old, member})
	}
	z.scores[member] = score
	it := zitem{score, member}
	i, _ := slices.BinarySearchFunc(z.items, it, compareItems)
	z.items = slices.Insert(z.items, i, it)
	return !ok
}

// remove removes member and reports whether it was there.
func (z *zset) remove(member string) bool {
	score, ok := z.scores[member]
	if !ok {
		return false
	}
	delete(z.scores, member)
	z.removeItem(zitem{score, member})
	return true
}

func (z *zset) removeItem(it zitem) {
	if i, found := slices.BinarySearchFunc(z.items, it, compareItems); found {
		z.items = slices.Delete(z.items, i, i+1)
	}
}

// firstIn returns the index of the first item at or above min.
func (z *zset) firstIn(min scoreBound) int {
	i, _ := slices.BinarySearchFunc(z.items, min, func(it zitem, b scoreBound) int {
		if it.score < b.v || (b.exclusive && it.score == b.v) {
			return -1
		}
		return 1
	})
	return i
}

// byScore returns the indexes [from, to) of the items in [min, max].
func (z *zset) byScore(min, max scoreBound) (int, int) {
	from := z.firstIn(min)
	to := from
	for to < len(z.items) && inRange(z.items[to].score, min, max) {
		to++
	}
	return from, to
}
