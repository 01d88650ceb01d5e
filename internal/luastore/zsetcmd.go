package luastore

import (
	"math"
	"strings"
)

// Sorted set commands: ZADD, ZCARD, ZSCORE, ZREM, ZRANGE, ZRANGEBYSCORE,
// ZREMRANGEBYSCORE. Scores in replies are bulk strings, "%.17g" as Redis
// 7.0 writes them to a script (RESP2), "inf" and "-inf" for the
// infinities.

// scoreString is a score as Redis 7.0 replies it.
func scoreString(f float64) string {
	if math.IsInf(f, 1) {
		return "inf"
	}
	if math.IsInf(f, -1) {
		return "-inf"
	}
	return formatG(f, 17)
}

// ZADD's options.
const (
	zaddNX = 1 << iota
	zaddXX
	zaddGT
	zaddLT
	zaddCH
	zaddIncr
)

func cmdZAdd(s *Store, args []string) any {
	flags, i := 0, 2
options:
	for ; i < len(args); i++ {
		switch strings.ToUpper(args[i]) {
		case "NX":
			flags |= zaddNX
		case "XX":
			flags |= zaddXX
		case "GT":
			flags |= zaddGT
		case "LT":
			flags |= zaddLT
		case "CH":
			flags |= zaddCH
		case "INCR":
			flags |= zaddIncr
		default:
			break options
		}
	}
	pairs := args[i:]
	if len(pairs) == 0 || len(pairs)%2 != 0 {
		return errSyntax
	}
	if flags&zaddNX != 0 && flags&zaddXX != 0 {
		return Error("ERR XX and NX options at the same time are not compatible")
	}
	if (flags&zaddGT != 0 && flags&zaddNX != 0) || (flags&zaddLT != 0 && flags&zaddNX != 0) || (flags&zaddGT != 0 && flags&zaddLT != 0) {
		return Error("ERR GT, LT, and/or NX options at the same time are not compatible")
	}
	if flags&zaddIncr != 0 && len(pairs) > 2 {
		return Error("ERR INCR option supports a single increment-element pair")
	}
	scores := make([]float64, len(pairs)/2)
	for j := range scores {
		v, ok := string2d(pairs[2*j])
		if !ok {
			return errNotFloat
		}
		scores[j] = v
	}
	e, err := s.lookupKind(args[1], kindZSet)
	if err != nil {
		return err
	}
	if e == nil {
		if flags&zaddXX != 0 {
			if flags&zaddIncr != 0 {
				return nil
			}
			return int64(0)
		}
		e = s.create(args[1], kindZSet)
	}
	added, changed := int64(0), int64(0)
	var incrResult any
	for j, score := range scores {
		member := pairs[2*j+1]
		cur, exists := e.zset.scores[member]
		if exists {
			if flags&zaddNX != 0 {
				continue
			}
			if flags&zaddIncr != 0 {
				score += cur
				if math.IsNaN(score) {
					s.dropIfEmpty(args[1], e)
					return Error("ERR resulting score is not a number (NaN)")
				}
			}
			if (flags&zaddGT != 0 && score <= cur) || (flags&zaddLT != 0 && score >= cur) {
				continue
			}
			incrResult = scoreString(score)
			if score != cur {
				e.zset.add(member, score)
				changed++
			}
			continue
		}
		if flags&zaddXX != 0 {
			continue
		}
		e.zset.add(member, score)
		added++
		incrResult = scoreString(score)
	}
	s.dropIfEmpty(args[1], e)
	if flags&zaddIncr != 0 {
		return incrResult
	}
	if flags&zaddCH != 0 {
		return added + changed
	}
	return added
}

func cmdZCard(s *Store, args []string) any {
	e, err := s.lookupKind(args[1], kindZSet)
	if err != nil {
		return err
	}
	if e == nil {
		return int64(0)
	}
	return int64(e.zset.len())
}

// scoreRange reads the sorted set at args[1] and the ranks from, to (to
// excluded) of its members whose scores lie from args[2] to args[3] (bounds
// as ZRANGEBYSCORE reads them); e is nil when the key is absent, and fail,
// when not nil, is the command's error reply.
func scoreRange(s *Store, args []string) (e *entry, from, to int, fail any) {
	min, ok1 := parseScoreBound(args[2])
	max, ok2 := parseScoreBound(args[3])
	if !ok1 || !ok2 {
		return nil, 0, 0, Error("ERR min or max is not a float")
	}
	e, err := s.lookupKind(args[1], kindZSet)
	if err != nil {
		return nil, 0, 0, err
	}
	if e == nil {
		return nil, 0, 0, nil
	}
	from, to = e.zset.byScore(min, max)
	return e, from, to, nil
}

// cmdZCount replies how many members' scores lie in a score range.
func cmdZCount(s *Store, args []string) any {
	_, from, to, fail := scoreRange(s, args)
	if fail != nil {
		return fail
	}
	return int64(to - from)
}

func cmdZScore(s *Store, args []string) any {
	e, err := s.lookupKind(args[1], kindZSet)
	if err != nil {
		return err
	}
	if e == nil {
		return nil
	}
	if v, ok := e.zset.scores[args[2]]; ok {
		return scoreString(v)
	}
	return nil
}

func cmdZRem(s *Store, args []string) any {
	e, err := s.lookupKind(args[1], kindZSet)
	if err != nil {
		return err
	}
	if e == nil {
		return int64(0)
	}
	n := int64(0)
	for _, m := range args[2:] {
		if e.zset.remove(m) {
			n++
		}
	}
	s.dropIfEmpty(args[1], e)
	return n
}

func cmdZRemRangeByScore(s *Store, args []string) any {
	e, from, to, fail := scoreRange(s, args)
	if fail != nil {
		return fail
	}
	if e == nil {
		return int64(0)
	}
	for _, it := range e.zset.items[from:to] {
		delete(e.zset.scores, it.member)
	}
	e.zset.items = append(e.zset.items[:from], e.zset.items[to:]...)
	s.dropIfEmpty(args[1], e)
	return int64(to - from)
}

// zrangeOpts are ZRANGE's options.
type zrangeOpts struct {
	byScore, byLex, rev, withScores, limited bool
	offset, count                            int64
}

func cmdZRangeByScore(s *Store, args []string) any {
	o, err := parseZRangeOpts(args[4:], true)
	if err != nil {
		return err
	}
	o.byScore = true
	return zrange(s, args[1], args[2], args[3], o)
}

func cmdZRange(s *Store, args []string) any {
	o, err := parseZRangeOpts(args[4:], false)
	if err != nil {
		return err
	}
	switch {
	case o.byLex:
		return Error(errUnsupported + "ZRANGE BYLEX")
	case o.limited && !o.byScore:
		return Error("ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX")
	}
	start, stop := args[2], args[3]
	if o.byScore && o.rev {
		start, stop = stop, start
	}
	return zrange(s, args[1], start, stop, o)
}

// parseZRangeOpts reads WITHSCORES, LIMIT offset count, and (ZRANGE)
// BYSCORE, BYLEX, REV.
func parseZRangeOpts(args []string, byScoreCmd bool) (zrangeOpts, error) {
	o := zrangeOpts{count: -1}
	for j := 0; j < len(args); j++ {
		switch a := strings.ToUpper(args[j]); {
		case a == "WITHSCORES":
			o.withScores = true
		case a == "LIMIT" && j+2 < len(args):
			off, ok1 := string2ll(args[j+1])
			cnt, ok2 := string2ll(args[j+2])
			if !ok1 || !ok2 {
				return o, errNotInt
			}
			o.limited, o.offset, o.count = true, off, cnt
			j += 2
		case !byScoreCmd && a == "BYSCORE":
			o.byScore = true
		case !byScoreCmd && a == "BYLEX":
			o.byLex = true
		case !byScoreCmd && a == "REV":
			o.rev = true
		default:
			return o, errSyntax
		}
	}
	return o, nil
}

// zrange replies the members (and scores) of key from start to stop: ranks
// or, byScore, a score range; in reverse with rev.
func zrange(s *Store, key, start, stop string, o zrangeOpts) any {
	var from, to int
	var e *entry
	if o.byScore {
		min, ok1 := parseScoreBound(start)
		max, ok2 := parseScoreBound(stop)
		if !ok1 || !ok2 {
			return Error("ERR min or max is not a float")
		}
		var err error
		if e, err = s.lookupKind(key, kindZSet); err != nil {
			return err
		}
		if e == nil {
			return []any{}
		}
		from, to = e.zset.byScore(min, max)
	} else {
		a, ok1 := string2ll(start)
		b, ok2 := string2ll(stop)
		if !ok1 || !ok2 {
			return errNotInt
		}
		var err error
		if e, err = s.lookupKind(key, kindZSet); err != nil {
			return err
		}
		if e == nil {
			return []any{}
		}
		n := e.zset.len()
		i, j, ok := listRange(a, b, n)
		if !ok {
			return []any{}
		}
		if o.rev {
			i, j = n-1-j, n-1-i
		}
		from, to = i, j+1
	}
	items := e.zset.items[from:to]
	idx := make([]int, 0, len(items))
	for k := range items {
		if o.rev {
			idx = append(idx, len(items)-1-k)
		} else {
			idx = append(idx, k)
		}
	}
	if o.byScore {
		// LIMIT: a negative offset gives nothing, a negative count all.
		if o.offset < 0 || o.offset > int64(len(idx)) {
			idx = nil
		} else {
			idx = idx[o.offset:]
		}
		if o.count >= 0 && o.count < int64(len(idx)) {
			idx = idx[:o.count]
		}
	}
	out := make([]any, 0, len(idx)*2)
	for _, k := range idx {
		out = append(out, items[k].member)
		if o.withScores {
			out = append(out, scoreString(items[k].score))
		}
	}
	return out
}
