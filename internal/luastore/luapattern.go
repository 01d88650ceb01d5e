package luastore

import (
	"strings"

	lua "github.com/yuin/gopher-lua"
)

// Lua 5.1's patterns: string.find, match, gmatch and gsub as lstrlib.c
// (Lua 5.1.5, which Redis embeds) has them, a backtracking matcher with no
// compile step. gopher-lua's own compiles the pattern on every call (a
// quarter of a reservation's time went there) and differs at the edges
// (string.match without a match returns no value; gmatch's "^").

const (
	maxCaptures   = 32
	capUnfinished = -1
	capPosition   = -2
	specials      = "^$*+?.([%-"
)

type matchState struct {
	L     *lua.LState
	src   string
	pat   string
	level int
	capt  [maxCaptures]struct{ init, len int }
}

// at returns the pattern's byte at p, 0 past its end (C's terminator).
func (ms *matchState) at(p int) byte {
	if p < len(ms.pat) {
		return ms.pat[p]
	}
	return 0
}

// char returns the subject's byte at s, 0 at its end.
func (ms *matchState) char(s int) byte {
	if s < len(ms.src) {
		return ms.src[s]
	}
	return 0
}

func (ms *matchState) classEnd(p int) int {
	c := ms.at(p)
	p++
	switch c {
	case '%':
		if p >= len(ms.pat) {
			ms.L.RaiseError("malformed pattern (ends with '%%')")
		}
		return p + 1
	case '[':
		if ms.at(p) == '^' {
			p++
		}
		for {
			if p >= len(ms.pat) {
				ms.L.RaiseError("malformed pattern (missing ']')")
			}
			c := ms.pat[p]
			p++
			if c == '%' && p < len(ms.pat) {
				p++
			}
			if ms.at(p) == ']' {
				return p + 1
			}
		}
	}
	return p
}

// matchClass is match_class: c against the class letter cl (C's ctype in
// the "C" locale; an upper-case letter complements).
func matchClass(c, cl byte) bool {
	var res bool
	lower := cl | 0x20
	if cl < 'A' || (cl > 'Z' && cl < 'a') || cl > 'z' {
		return cl == c
	}
	switch lower {
	case 'a':
		res = isAlpha(c)
	case 'c':
		res = c < 32 || c == 127
	case 'd':
		res = isDigit(c)
	case 'l':
		res = c >= 'a' && c <= 'z'
	case 'p':
		res = c > 32 && c < 127 && !isAlnum(c)
	case 's':
		res = isCSpace(c)
	case 'u':
		res = c >= 'A' && c <= 'Z'
	case 'w':
		res = isAlnum(c)
	case 'x':
		res = isHex(c)
	case 'z':
		res = c == 0
	default:
		return cl == c
	}
	if cl >= 'A' && cl <= 'Z' {
		return !res
	}
	return res
}

func isAlpha(c byte) bool { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') }

// matchBracket is matchbracketclass: c against the set [p, ec] (ec at
// its "]").
func (ms *matchState) matchBracket(c byte, p, ec int) bool {
	sig := true
	if ms.at(p+1) == '^' {
		sig = false
		p++
	}
	for p++; p < ec; p++ {
		switch {
		case ms.pat[p] == '%':
			p++
			if matchClass(c, ms.at(p)) {
				return sig
			}
		case ms.at(p+1) == '-' && p+2 < ec:
			p += 2
			if ms.pat[p-2] <= c && c <= ms.pat[p] {
				return sig
			}
		case ms.pat[p] == c:
			return sig
		}
	}
	return !sig
}

func (ms *matchState) singleMatch(c byte, p, ep int) bool {
	switch ms.at(p) {
	case '.':
		return true
	case '%':
		return matchClass(c, ms.at(p+1))
	case '[':
		return ms.matchBracket(c, p, ep-1)
	}
	return ms.at(p) == c
}

// match returns the end of a match of the pattern from p at s, -1 if none.
func (ms *matchState) match(s, p int) int {
	for {
		switch ms.at(p) {
		case '(':
			if ms.at(p+1) == ')' {
				return ms.startCapture(s, p+2, capPosition)
			}
			return ms.startCapture(s, p+1, capUnfinished)
		case ')':
			return ms.endCapture(s, p+1)
		case 0:
			if p >= len(ms.pat) {
				return s
			}
		case '$':
			if p+1 == len(ms.pat) {
				if s == len(ms.src) {
					return s
				}
				return -1
			}
		case '%':
			switch ms.at(p + 1) {
			case 'b':
				if s = ms.matchBalance(s, p+2); s < 0 {
					return -1
				}
				p += 4
				continue
			case 'f':
				p += 2
				if ms.at(p) != '[' {
					ms.L.RaiseError("missing '[' after '%%f' in pattern")
				}
				ep := ms.classEnd(p)
				var prev byte
				if s > 0 {
					prev = ms.src[s-1]
				}
				if ms.matchBracket(prev, p, ep-1) || !ms.matchBracket(ms.char(s), p, ep-1) {
					return -1
				}
				p = ep
				continue
			default:
				if d := ms.at(p + 1); isDigit(d) {
					if s = ms.matchCapture(s, d); s < 0 {
						return -1
					}
					p += 2
					continue
				}
			}
		}
		// A single character class, maybe repeated.
		ep := ms.classEnd(p)
		m := s < len(ms.src) && ms.singleMatch(ms.src[s], p, ep)
		switch ms.at(ep) {
		case '?':
			if m {
				if res := ms.match(s+1, ep+1); res >= 0 {
					return res
				}
			}
			p = ep + 1
			continue
		case '*':
			return ms.maxExpand(s, p, ep)
		case '+':
			if !m {
				return -1
			}
			return ms.maxExpand(s+1, p, ep)
		case '-':
			return ms.minExpand(s, p, ep)
		}
		if !m {
			return -1
		}
		s, p = s+1, ep
	}
}

func (ms *matchState) matchBalance(s, p int) int {
	if p+1 >= len(ms.pat) {
		ms.L.RaiseError("unbalanced pattern")
	}
	if s >= len(ms.src) || ms.src[s] != ms.pat[p] {
		return -1
	}
	b, e, cont := ms.pat[p], ms.pat[p+1], 1
	for s++; s < len(ms.src); s++ {
		switch ms.src[s] {
		case e:
			if cont--; cont == 0 {
				return s + 1
			}
		case b:
			cont++
		}
	}
	return -1
}

func (ms *matchState) maxExpand(s, p, ep int) int {
	i := 0
	for s+i < len(ms.src) && ms.singleMatch(ms.src[s+i], p, ep) {
		i++
	}
	for ; i >= 0; i-- {
		if res := ms.match(s+i, ep+1); res >= 0 {
			return res
		}
	}
	return -1
}

func (ms *matchState) minExpand(s, p, ep int) int {
	for {
		if res := ms.match(s, ep+1); res >= 0 {
			return res
		}
		if s < len(ms.src) && ms.singleMatch(ms.src[s], p, ep) {
			s++
		} else {
			return -1
		}
	}
}

func (ms *matchState) startCapture(s, p, what int) int {
	if ms.level >= maxCaptures {
		ms.L.RaiseError("too many captures")
	}
	ms.capt[ms.level].init, ms.capt[ms.level].len = s, what
	ms.level++
	res := ms.match(s, p)
	if res < 0 {
		ms.level--
	}
	return res
}

func (ms *matchState) endCapture(s, p int) int {
	l := -1
	for i := ms.level - 1; i >= 0; i-- {
		if ms.capt[i].len == capUnfinished {
			l = i
			break
		}
	}
	if l < 0 {
		ms.L.RaiseError("invalid pattern capture")
	}
	ms.capt[l].len = s - ms.capt[l].init
	res := ms.match(s, p)
	if res < 0 {
		ms.capt[l].len = capUnfinished
	}
	return res
}

func (ms *matchState) matchCapture(s int, d byte) int {
	l := int(d - '1')
	if l < 0 || l >= ms.level || ms.capt[l].len == capUnfinished {
		ms.L.RaiseError("invalid capture index")
	}
	c := ms.capt[l]
	if len(ms.src)-s >= c.len && ms.src[c.init:c.init+c.len] == ms.src[s:s+c.len] {
		return s + c.len
	}
	return -1
}

// capture returns capture i of a match [s, e) as Lua sees it.
func (ms *matchState) capture(i, s, e int) lua.LValue {
	if i >= ms.level {
		if i == 0 {
			return lua.LString(ms.src[s:e])
		}
		ms.L.RaiseError("invalid capture index")
	}
	c := ms.capt[i]
	switch c.len {
	case capUnfinished:
		ms.L.RaiseError("unfinished capture")
	case capPosition:
		return lua.LNumber(c.init + 1)
	}
	return lua.LString(ms.src[c.init : c.init+c.len])
}

// pushCaptures pushes a match's captures (the whole match if none, when
// whole) and returns how many.
func (ms *matchState) pushCaptures(s, e int, whole bool) int {
	n := ms.level
	if n == 0 && whole {
		n = 1
	}
	for i := range n {
		ms.L.Push(ms.capture(i, s, e))
	}
	return n
}

// newMatch returns a match state for src and pattern (up to a NUL, as C
// reads it).
func newMatch(L *lua.LState, src, pat string) *matchState {
	if i := strings.IndexByte(pat, 0); i >= 0 {
		pat = pat[:i]
	}
	return &matchState{L: L, src: src, pat: pat}
}

// initArg is str_find_aux's start: argument n (1-based, negative from the
// end, default 1) as a 0-based offset within [0, l].
func initArg(L *lua.LState, n, l int, fname string) int {
	init := 1
	if L.GetTop() >= n && L.Get(n) != lua.LNil {
		init = int(cInt64(checkLNumber(L, n, fname)))
	}
	if init < 0 {
		init += l + 1
		if init < 0 {
			init = 0
		}
	}
	init--
	if init < 0 {
		init = 0
	} else if init > l {
		init = l
	}
	return init
}

func strFind(L *lua.LState) int  { return findAux(L, true) }
func strMatch(L *lua.LState) int { return findAux(L, false) }

func findAux(L *lua.LState, find bool) int {
	fname := "match"
	if find {
		fname = "find"
	}
	s := checkLString(L, 1, fname)
	p := checkLString(L, 2, fname)
	init := initArg(L, 3, len(s), fname)
	if find && (lua.LVAsBool(L.Get(4)) || !strings.ContainsAny(cString(p), specials)) {
		if i := strings.Index(s[init:], p); i >= 0 {
			L.Push(lua.LNumber(init + i + 1))
			L.Push(lua.LNumber(init + i + len(p)))
			return 2
		}
		L.Push(lua.LNil)
		return 1
	}
	ms := newMatch(L, s, p)
	anchor := ms.at(0) == '^'
	start := 0
	if anchor {
		start = 1
	}
	for s1 := init; ; s1++ {
		ms.level = 0
		if e := ms.match(s1, start); e >= 0 {
			if find {
				L.Push(lua.LNumber(s1 + 1))
				L.Push(lua.LNumber(e))
				return ms.pushCaptures(0, 0, false) + 2
			}
			return ms.pushCaptures(s1, e, true)
		}
		if s1 >= len(s) || anchor {
			break
		}
	}
	L.Push(lua.LNil)
	return 1
}

// cString is s up to its first NUL.
func cString(s string) string {
	if i := strings.IndexByte(s, 0); i >= 0 {
		return s[:i]
	}
	return s
}

func strGmatch(L *lua.LState) int {
	s := checkLString(L, 1, "gmatch")
	p := checkLString(L, 2, "gmatch")
	pos := 0
	L.Push(L.NewFunction(func(L *lua.LState) int {
		ms := newMatch(L, s, p)
		for src := pos; src <= len(s); src++ {
			ms.level = 0
			if e := ms.match(src, 0); e >= 0 {
				pos = e
				if e == src {
					pos++ // an empty match: move on at least one
				}
				return ms.pushCaptures(src, e, true)
			}
		}
		pos = len(s) + 1
		return 0
	}))
	return 1
}

func strGsub(L *lua.LState) int {
	src := checkLString(L, 1, "gsub")
	p := checkLString(L, 2, "gsub")
	repl := L.Get(3)
	switch repl.Type() {
	case lua.LTNumber, lua.LTString, lua.LTFunction, lua.LTTable:
	default:
		L.ArgError(3, "string/function/table expected")
	}
	maxN := len(src) + 1
	if L.GetTop() >= 4 && L.Get(4) != lua.LNil {
		maxN = int(cInt64(checkLNumber(L, 4, "gsub")))
	}
	ms := newMatch(L, src, p)
	anchor := ms.at(0) == '^'
	start := 0
	if anchor {
		start = 1
	}
	var b strings.Builder
	s, n := 0, 0
loop:
	for n < maxN {
		ms.level = 0
		e := ms.match(s, start)
		if e >= 0 {
			n++
			ms.addValue(&b, repl, s, e)
		}
		switch {
		case e >= 0 && e > s:
			s = e
		case s < len(src):
			b.WriteByte(src[s])
			s++
		default:
			break loop
		}
		if anchor {
			break
		}
	}
	b.WriteString(src[s:])
	L.Push(lua.LString(b.String()))
	L.Push(lua.LNumber(n))
	return 2
}

// addValue appends the replacement of the match [s, e) (add_value).
func (ms *matchState) addValue(b *strings.Builder, repl lua.LValue, s, e int) {
	L := ms.L
	var v lua.LValue
	switch r := repl.(type) {
	case lua.LString, lua.LNumber:
		news := luaString(r)
		for i := 0; i < len(news); i++ {
			c := news[i]
			if c != '%' {
				b.WriteByte(c)
				continue
			}
			i++
			var d byte
			if i < len(news) {
				d = news[i]
			}
			switch {
			case !isDigit(d):
				b.WriteByte(d)
			case d == '0':
				b.WriteString(ms.src[s:e])
			default:
				b.WriteString(luaString(ms.capture(int(d-'1'), s, e)))
			}
		}
		return
	case *lua.LFunction:
		L.Push(r)
		n := ms.pushCaptures(s, e, true)
		L.Call(n, 1)
		v = L.Get(-1)
		L.Pop(1)
	case *lua.LTable:
		v = L.GetTable(r, ms.capture(0, s, e))
	}
	switch x := v.(type) {
	case *lua.LNilType:
		b.WriteString(ms.src[s:e])
	case lua.LBool:
		if !x {
			b.WriteString(ms.src[s:e])
		} else {
			L.RaiseError("invalid replacement value (a boolean)")
		}
	case lua.LString, lua.LNumber:
		b.WriteString(luaString(x))
	default:
		L.RaiseError("invalid replacement value (a %s)", v.Type().String())
	}
}
