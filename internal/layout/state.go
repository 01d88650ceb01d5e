package layout

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// State is a key's state (lua/core.lua, KEYS[1]) read in Go, in any of its
// formats: 3, binary, written by this version's scripts once the fleet is
// switched to it; 2, text ("t x s p" then records), this version's default;
// or 1, text written by older versions ("1 t x s p c" then records).
type State struct {
	Format  int     // 1, 2 or 3
	T       int64   // Unix µs every time below counts from
	XNS     int64   // the key's expiry as last set, ns after T
	Seq     int64   // the last reservation's number
	PauseNS float64 // no slot before T + PauseNS (ns)
	Stored  bool    // a stored limit may exist (the flag)
	Records []Record
}

// Record is one band's record: a bucket's z and e (ns after T), or a
// window's index and units.
type Record struct {
	Name   string
	Bucket bool
	X, Y   float64
}

// permits is the name of a single Limit's band (reserve.PermitsUnit),
// whose record formats 2 and 3 write without it.
const permits = "permits"

// The first byte of a format 3 state: its form (the high bits) and the
// flag (the lowest bit).
const (
	form3Fresh   = 0xA0 // "<BI7HB": t, x, s; z = e = t
	form3Whole   = 0xB0 // "<BI7I4I4i6i6": t, x, s, z, e
	form3Doubles = 0xC0 // "<BI7I4I6dd": t, x, s, z, e
	form3General = 0xD0 // "<BI7I6I6d" t, x, s, p, then format 2's records
)

// StateFormat returns the format of a state string: 1, 2 or 3 (3 for
// anything whose first byte is not a digit).
func StateFormat(state string) int {
	switch {
	case strings.HasPrefix(state, "1 "):
		return 1
	case state != "" && state[0] >= '0' && state[0] <= '9':
		return 2
	}
	return 3
}

// le reads a little-endian unsigned integer of up to 8 bytes.
func le(b string) uint64 {
	var v uint64
	for i := len(b) - 1; i >= 0; i-- {
		v = v<<8 | uint64(b[i])
	}
	return v
}

// sle reads a little-endian signed integer of up to 8 bytes.
func sle(b string) int64 {
	v := le(b)
	if n := uint(len(b) * 8); n < 64 && v&(1<<(n-1)) != 0 {
		v |= ^uint64(0) << n
	}
	return int64(v)
}

// dle reads a little-endian double.
func dle(b string) float64 { return math.Float64frombits(le(b)) }

// head3 reads a format 3 state's head: its write time, expiry (ms after
// t), number, pause (ns after t), the flag, and the rest (a Limit's
// record, or format 2's records as text); ok is false if it is not one.
func head3(text string) (t, xMS, seq int64, pause float64, flag bool, z, e float64, limit bool, rest string, ok bool) {
	if len(text) == 0 || text[0] < form3Fresh {
		return
	}
	flag = text[0]&1 == 1
	switch form := text[0] &^ 1; {
	case form == form3Fresh && len(text) == 11:
		return int64(le(text[1:8])), int64(le(text[8:10])), int64(text[10]), 0, flag, 0, 0, true, "", true
	case form == form3Whole && len(text) == 28:
		return int64(le(text[1:8])), int64(le(text[8:12])), int64(le(text[12:16])), 0, flag,
			float64(sle(text[16:22])), float64(sle(text[22:28])), true, "", true
	case form == form3Doubles && len(text) == 34:
		return int64(le(text[1:8])), int64(le(text[8:12])), int64(le(text[12:18])), 0, flag,
			dle(text[18:26]), dle(text[26:34]), true, "", true
	case form == form3General && len(text) >= 28:
		p := dle(text[20:28])
		if math.IsNaN(p) || math.IsInf(p, 0) {
			return
		}
		return int64(le(text[1:8])), int64(le(text[8:14])), int64(le(text[14:20])), p, flag, 0, 0, false, text[28:], true
	}
	return
}

// ParseState reads a state string.
func ParseState(text string) (State, error) {
	bad := func() error { return fmt.Errorf("unreadable state %q", text) } // made only when needed: states are parsed on every reply
	var st State
	var recs []string
	v1 := false
	switch st.Format = StateFormat(text); st.Format {
	case 3:
		t, x, seq, p, flag, z, e, limit, rest, ok := head3(text)
		if !ok {
			return st, bad()
		}
		st.T, st.XNS, st.Seq, st.PauseNS, st.Stored = t, x*1_000_000, seq, p, flag
		if limit {
			st.Records = []Record{{Name: permits, Bucket: true, X: z, Y: e}}
			return st, nil
		}
		recs = strings.Fields(rest)
		if len(recs) == 2 {
			// A Limit's one bucket, written without its name.
			recs = []string{permits, recs[0], recs[1]}
		}
	case 1:
		f := strings.Fields(text)
		if len(f) < 6 || (len(f)-6)%3 != 0 {
			return st, bad()
		}
		var err1, err2, err3, err4 error
		st.T, err1 = strconv.ParseInt(f[1], 10, 64)
		st.XNS, err4 = strconv.ParseInt(f[2], 10, 64)
		st.Seq, err2 = strconv.ParseInt(f[3], 10, 64)
		st.PauseNS, err3 = strconv.ParseFloat(f[4], 64)
		st.Stored = f[5] == "1"
		if err1 != nil || err2 != nil || err3 != nil || err4 != nil {
			return st, bad()
		}
		recs, v1 = f[6:], true
	default:
		f := strings.Fields(text)
		if len(f) < 4 || len(f[0]) < 2 {
			return st, bad()
		}
		var err1, err2, err3, err4 error
		var x int64
		st.T, err1 = strconv.ParseInt(f[0], 10, 64)
		x, err4 = strconv.ParseInt(f[1], 10, 64)
		st.Seq, err2 = strconv.ParseInt(f[2], 10, 64)
		p, stored := strings.CutPrefix(f[3], "c")
		st.PauseNS, err3 = strconv.ParseFloat(p, 64)
		st.XNS, st.Stored = x*1_000_000, stored
		if err1 != nil || err2 != nil || err3 != nil || err4 != nil {
			return st, bad()
		}
		recs = f[4:]
		if len(recs) == 2 {
			// A Limit's one bucket, written without its name.
			recs = []string{permits, recs[0], recs[1]}
		}
	}
	if len(recs)%3 != 0 {
		return st, bad()
	}
	for i := 0; i < len(recs); i += 3 {
		if strings.HasPrefix(recs[i], "~") {
			continue // a pause's or a resume's record, not a band's (lua/core.lua)
		}
		r := Record{Name: recs[i], Bucket: true}
		x := recs[i+1]
		if v1 {
			// A bucket's z is written with a decimal point, a window's
			// index without.
			r.Bucket = strings.Contains(x, ".")
		} else if w, ok := strings.CutPrefix(x, "w"); ok {
			r.Bucket, x = false, w
		}
		var e1, e2 error
		r.X, e1 = strconv.ParseFloat(x, 64)
		r.Y, e2 = strconv.ParseFloat(recs[i+2], 64)
		if e1 != nil || e2 != nil {
			return st, bad()
		}
		st.Records = append(st.Records, r)
	}
	return st, nil
}

// PauseEnd returns the end of a state's pause, Unix ns (0: none): its
// write time t (µs) plus the pause p (ns after t), when p is a pause (see
// core.lua: a stored pause under 1 µs after the write is none, and one
// before the write has ended).
func PauseEnd(state string) int64 {
	if StateFormat(state) == 3 {
		t, _, _, p, _, _, _, _, _, ok := head3(state)
		if !ok || p < 1000 {
			return 0
		}
		return t*1000 + int64(math.Ceil(p))
	}
	// The fields by hand, not a parse: every reservation's reply is read.
	var f [5]string
	rest := state
	for i := range f {
		j := strings.IndexByte(rest, ' ')
		if j < 0 {
			f[i], rest = rest, ""
			if i < 3 {
				return 0
			}
			break
		}
		f[i], rest = rest[:j], rest[j+1:]
	}
	var t, p string
	if f[0] == "1" {
		t, p = f[1], f[4] // format 1: "1 t x s p c ..."
	} else {
		t, p = f[0], strings.TrimPrefix(f[3], "c")
	}
	tv, err1 := strconv.ParseInt(t, 10, 64)
	pv, err2 := strconv.ParseFloat(p, 64)
	if err1 != nil || err2 != nil || pv < 1000 {
		return 0
	}
	return tv*1000 + int64(math.Ceil(pv))
}

// Queue returns how far ahead of its write a state's buckets were queued:
// the latest zero time z of a bucket record, ns after the state's write
// time; 0 if none was ahead or the state cannot be read.
func Queue(state string) int64 {
	st, err := ParseState(state)
	if err != nil {
		return 0
	}
	q := 0.0
	for _, r := range st.Records {
		if r.Bucket && r.X > q {
			q = r.X
		}
	}
	return int64(q)
}

// LastEvent returns the latest slot a state's buckets record (their last
// events: the latest slot granted on them), Unix ns; 0 if none.
func LastEvent(state string) int64 {
	if StateFormat(state) == 3 {
		// A Limit's forms from the head alone: every reply is read.
		if t, _, _, _, _, _, e, limit, _, ok := head3(state); ok && limit {
			if e <= 0 {
				return 0
			}
			return t*1000 + int64(math.Ceil(e))
		}
	}
	st, err := ParseState(state)
	if err != nil {
		return 0
	}
	e := 0.0
	for _, r := range st.Records {
		if r.Bucket && r.Y > e {
			e = r.Y
		}
	}
	if e <= 0 {
		return 0
	}
	return st.T*1000 + int64(math.Ceil(e))
}

// Expiry returns when a state expires, Unix ns, from its own fields (its
// write time and its expiry relative to it); 0 if it cannot tell.
func Expiry(state string) int64 {
	if StateFormat(state) == 3 {
		t, x, _, _, _, _, _, _, _, ok := head3(state)
		if !ok {
			return 0
		}
		return t*1000 + x*1_000_000
	}
	f := strings.Fields(state)
	switch {
	case len(f) >= 3 && f[0] == "1":
		t, err1 := strconv.ParseInt(f[1], 10, 64)
		x, err2 := strconv.ParseInt(f[2], 10, 64) // ns after t
		if err1 == nil && err2 == nil {
			return t*1000 + x
		}
	case len(f) >= 2 && len(f[0]) > 1:
		t, err1 := strconv.ParseInt(f[0], 10, 64)
		x, err2 := strconv.ParseInt(f[1], 10, 64) // ms after t
		if err1 == nil && err2 == nil {
			return t*1000 + x*1_000_000
		}
	}
	return 0
}

// WindowUse is a window band's record: its latest window and the units
// reserved in it.
type WindowUse struct{ W, U float64 }

// Windows returns a state's window records by band name.
func Windows(state string) map[string]WindowUse {
	st, err := ParseState(state)
	out := map[string]WindowUse{}
	if err != nil {
		return out
	}
	for _, r := range st.Records {
		if !r.Bucket {
			out[r.Name] = WindowUse{r.X, r.Y}
		}
	}
	return out
}

// StateTime returns a state's write time, Unix µs on the clock that wrote
// it (0 if it cannot be read).
func StateTime(state string) int64 {
	t, _ := StateHead(state)
	return t
}

// StateHead returns a state's write time (Unix µs on the clock that wrote
// it) and the number of its last reservation, read from its head alone
// (both 0 if it cannot be read).
func StateHead(state string) (t, seq int64) {
	if StateFormat(state) == 3 {
		t, _, seq, _, _, _, _, _, _, ok := head3(state)
		if !ok {
			return 0, 0
		}
		return t, seq
	}
	f, rest, _ := strings.Cut(state, " ")
	if f == "1" { // format 1: "1 t x s ..."
		f, rest, _ = strings.Cut(rest, " ")
	}
	_, rest, _ = strings.Cut(rest, " ") // x
	s, _, _ := strings.Cut(rest, " ")
	t, err1 := strconv.ParseInt(f, 10, 64)
	q, err2 := strconv.ParseInt(s, 10, 64)
	if err1 != nil || err2 != nil {
		return 0, 0
	}
	return t, q
}
