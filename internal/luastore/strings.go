package luastore

import (
	"math"
	"strconv"
	"strings"
)

// Commands on keys and string values: GET, SET, INCR, INCRBY, DEL,
// EXISTS, TYPE, PTTL, TTL, PEXPIRE, EXPIRE, PEXPIREAT, TIME.

func cmdGet(s *Store, args []string) any {
	e, err := s.lookupKind(args[1], kindString)
	if err != nil {
		return err
	}
	if e == nil {
		return nil
	}
	return e.str
}

// SET's options (Redis 7.0's parseExtendedStringArgumentsOrReply).
const (
	setNX = 1 << iota
	setXX
	setGet
	setKeepTTL
	setEX
	setPX
	setEXAT
	setPXAT
)

func cmdSet(s *Store, args []string) any {
	key, val := args[1], args[2]
	flags := 0
	var expireArg string
	for j := 3; j < len(args); j++ {
		opt := strings.ToUpper(args[j])
		hasNext := j+1 < len(args)
		expiring := flags & (setEX | setPX | setEXAT | setPXAT)
		switch {
		case opt == "NX" && flags&setXX == 0:
			flags |= setNX
		case opt == "XX" && flags&setNX == 0:
			flags |= setXX
		case opt == "GET":
			flags |= setGet
		case opt == "KEEPTTL" && expiring == 0:
			flags |= setKeepTTL
		case opt == "EX" && flags&setKeepTTL == 0 && expiring&^setEX == 0 && hasNext:
			flags |= setEX
			j++
			expireArg = args[j]
		case opt == "PX" && flags&setKeepTTL == 0 && expiring&^setPX == 0 && hasNext:
			flags |= setPX
			j++
			expireArg = args[j]
		case opt == "EXAT" && flags&setKeepTTL == 0 && expiring&^setEXAT == 0 && hasNext:
			flags |= setEXAT
			j++
			expireArg = args[j]
		case opt == "PXAT" && flags&setKeepTTL == 0 && expiring&^setPXAT == 0 && hasNext:
			flags |= setPXAT
			j++
			expireArg = args[j]
		default:
			return errSyntax
		}
	}
	var when int64
	if flags&(setEX|setPX|setEXAT|setPXAT) != 0 {
		ms, ok := string2ll(expireArg)
		if !ok {
			return errNotInt
		}
		seconds := flags&(setEX|setEXAT) != 0
		if ms <= 0 || (seconds && ms > math.MaxInt64/1000) {
			return Error("ERR invalid expire time in 'set' command")
		}
		if seconds {
			ms *= 1000
		}
		if flags&(setEX|setPX) != 0 {
			ms += s.nowMs
		}
		if ms <= 0 {
			return Error("ERR invalid expire time in 'set' command")
		}
		when = ms
	}
	var old any
	e := s.lookup(key)
	if flags&setGet != 0 {
		if e != nil && e.kind != kindString {
			return errWrongType
		}
		if e != nil {
			old = e.str
		}
	}
	if (flags&setNX != 0 && e != nil) || (flags&setXX != 0 && e == nil) {
		if flags&setGet != 0 {
			return old
		}
		return nil
	}
	keep := int64(0)
	if flags&setKeepTTL != 0 && e != nil {
		keep = e.expire
	}
	s.keys[key] = &entry{kind: kindString, str: val, expire: keep}
	if when != 0 {
		s.keys[key].expire = when
	}
	if flags&setGet != 0 {
		return old
	}
	return status("OK")
}

func cmdIncr(s *Store, args []string) any { return incrBy(s, args[1], 1) }

func cmdIncrBy(s *Store, args []string) any {
	by, ok := string2ll(args[2])
	if !ok {
		return errNotInt
	}
	return incrBy(s, args[1], by)
}

func incrBy(s *Store, key string, by int64) any {
	e, err := s.lookupKind(key, kindString)
	if err != nil {
		return err
	}
	var v int64
	if e != nil {
		var ok bool
		if v, ok = string2ll(e.str); !ok {
			return errNotInt
		}
	}
	if (by < 0 && v < 0 && by < math.MinInt64-v) || (by > 0 && v > 0 && by > math.MaxInt64-v) {
		return Error("ERR increment or decrement would overflow")
	}
	v += by
	if e == nil {
		e = s.create(key, kindString)
	}
	e.str = strconv.FormatInt(v, 10)
	return v
}

func cmdDel(s *Store, args []string) any {
	n := int64(0)
	for _, k := range args[1:] {
		if s.lookup(k) != nil {
			delete(s.keys, k)
			n++
		}
	}
	return n
}

func cmdExists(s *Store, args []string) any {
	n := int64(0)
	for _, k := range args[1:] {
		if s.lookup(k) != nil {
			n++
		}
	}
	return n
}

func cmdType(s *Store, args []string) any {
	e := s.lookup(args[1])
	if e == nil {
		return status("none")
	}
	return status(e.kind.String())
}

func cmdPTTL(s *Store, args []string) any { return s.ttl(args[1]) }

func cmdTTL(s *Store, args []string) any {
	t := s.ttl(args[1])
	if t < 0 {
		return t
	}
	return (t + 500) / 1000
}

func cmdPExpire(s *Store, args []string) any   { return expire(s, args, s.nowMs, false) }
func cmdExpire(s *Store, args []string) any    { return expire(s, args, s.nowMs, true) }
func cmdPExpireAt(s *Store, args []string) any { return expire(s, args, 0, false) }

// EXPIRE's options (Redis 7.0).
const (
	expireNX = 1 << iota
	expireXX
	expireGT
	expireLT
)

// expire is Redis 7.0's expireGenericCommand: args[2] is relative to base
// (ms), in seconds when seconds.
func expire(s *Store, args []string, base int64, seconds bool) any {
	name := strings.ToLower(args[0])
	flags := 0
	for _, a := range args[3:] {
		switch strings.ToUpper(a) {
		case "NX":
			flags |= expireNX
		case "XX":
			flags |= expireXX
		case "GT":
			flags |= expireGT
		case "LT":
			flags |= expireLT
		default:
			return Error("ERR Unsupported option " + a)
		}
	}
	if flags&expireNX != 0 && flags&(expireXX|expireGT|expireLT) != 0 {
		return Error("ERR NX and XX, GT or LT options at the same time are not compatible")
	}
	if flags&expireGT != 0 && flags&expireLT != 0 {
		return Error("ERR GT and LT options at the same time are not compatible")
	}
	when, ok := string2ll(args[2])
	if !ok {
		return errNotInt
	}
	badTime := Error("ERR invalid expire time in '" + name + "' command")
	if seconds {
		if when > math.MaxInt64/1000 || when < math.MinInt64/1000 {
			return badTime
		}
		when *= 1000
	}
	if when > math.MaxInt64-base {
		return badTime
	}
	when += base
	e := s.lookup(args[1])
	if e == nil {
		return int64(0)
	}
	current := e.expire
	if current == 0 {
		current = -1
	}
	switch {
	case flags&expireNX != 0 && current != -1,
		flags&expireXX != 0 && current == -1,
		flags&expireGT != 0 && (when <= current || current == -1),
		flags&expireLT != 0 && current != -1 && when >= current:
		return int64(0)
	}
	if when <= s.nowMs {
		delete(s.keys, args[1])
		return int64(1)
	}
	e.expire = when
	return int64(1)
}

func cmdTime(s *Store, _ []string) any {
	return []any{strconv.FormatInt(s.now.Unix(), 10), strconv.FormatInt(int64(s.now.Nanosecond()/1000), 10)}
}
