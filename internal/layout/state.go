package layout

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// State is a key's state string (lua/core.lua, KEYS[1]) read in Go, in
// either format: 2, written by this version's scripts ("t x s p" then
// records), or 1, written by older ones ("1 t x s p c" then records).
type State struct {
	T       int64   // Unix µs every time below counts from
	Seq     int64   // the last reservation's number
	PauseNS float64 // no slot before T + PauseNS (ns)
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
// whose record format 2 writes without it.
const permits = "permits"

// ParseState reads a state string.
func ParseState(text string) (State, error) {
	bad := func() error { return fmt.Errorf("unreadable state %q", text) } // made only when needed: states are parsed on every reply
	f := strings.Fields(text)
	var st State
	var err1, err2, err3 error
	var recs []string
	v1 := len(f) > 0 && f[0] == "1"
	if v1 {
		if len(f) < 6 || (len(f)-6)%3 != 0 {
			return st, bad()
		}
		st.T, err1 = strconv.ParseInt(f[1], 10, 64)
		st.Seq, err2 = strconv.ParseInt(f[3], 10, 64)
		st.PauseNS, err3 = strconv.ParseFloat(f[4], 64)
		recs = f[6:]
	} else {
		if len(f) < 4 || len(f[0]) < 2 {
			return st, bad()
		}
		st.T, err1 = strconv.ParseInt(f[0], 10, 64)
		st.Seq, err2 = strconv.ParseInt(f[2], 10, 64)
		st.PauseNS, err3 = strconv.ParseFloat(strings.TrimPrefix(f[3], "c"), 64)
		recs = f[4:]
		if len(recs) == 2 {
			// A Limit's one bucket, written without its name.
			recs = []string{permits, recs[0], recs[1]}
		}
		if len(recs)%3 != 0 {
			return st, bad()
		}
	}
	if err1 != nil || err2 != nil || err3 != nil {
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
