package luastore

import "slices"

// Lists: LPUSH, LTRIM, LRANGE, LLEN.

func cmdLPush(s *Store, args []string) any {
	e, err := s.lookupKind(args[1], kindList)
	if err != nil {
		return err
	}
	if e == nil {
		e = s.create(args[1], kindList)
	}
	vals := slices.Clone(args[2:])
	slices.Reverse(vals)
	e.list = append(vals, e.list...)
	return int64(len(e.list))
}

// listRange normalizes start and stop (negative: from the end) for a list
// of n elements as LRANGE and LTRIM do; ok is false for an empty range.
func listRange(start, stop int64, n int) (int, int, bool) {
	l := int64(n)
	if start < 0 {
		start += l
	}
	if stop < 0 {
		stop += l
	}
	if start < 0 {
		start = 0
	}
	if start > stop || start >= l {
		return 0, 0, false
	}
	if stop >= l {
		stop = l - 1
	}
	return int(start), int(stop), true
}

func cmdLTrim(s *Store, args []string) any {
	start, ok1 := string2ll(args[2])
	stop, ok2 := string2ll(args[3])
	if !ok1 || !ok2 {
		return errNotInt
	}
	e, err := s.lookupKind(args[1], kindList)
	if err != nil {
		return err
	}
	if e == nil {
		return status("OK")
	}
	a, b, ok := listRange(start, stop, len(e.list))
	if !ok {
		e.list = nil
	} else {
		e.list = slices.Clone(e.list[a : b+1])
	}
	s.dropIfEmpty(args[1], e)
	return status("OK")
}

func cmdLRange(s *Store, args []string) any {
	start, ok1 := string2ll(args[2])
	stop, ok2 := string2ll(args[3])
	if !ok1 || !ok2 {
		return errNotInt
	}
	e, err := s.lookupKind(args[1], kindList)
	if err != nil {
		return err
	}
	out := []any{}
	if e == nil {
		return out
	}
	a, b, ok := listRange(start, stop, len(e.list))
	if !ok {
		return out
	}
	for _, v := range e.list[a : b+1] {
		out = append(out, v)
	}
	return out
}

func cmdLLen(s *Store, args []string) any {
	e, err := s.lookupKind(args[1], kindList)
	if err != nil {
		return err
	}
	if e == nil {
		return int64(0)
	}
	return int64(len(e.list))
}
