package combo

import (
	"encoding/json"
	"os"
	"sync"
)

// Call is one call a fleet process made to the provider: what the child
// sent, and what the provider made of it. All times are Unix ns on the one
// host's clock (Redis's TIME reads the same clock).
type Call struct {
	ID      string `json:"id"`
	Key     string `json:"k"`
	Child   string `json:"c"`
	Kind    string `json:"kind"`
	Attempt int    `json:"a,omitempty"` // retries of this call after a 429
	Within  int64  `json:"w,omitempty"` // an adaptive call's own deadline, ns after Grant
	Tenant  string `json:"t,omitempty"` // a fair call's tenant
	Lane    int    `json:"l,omitempty"` // and lane (reserve.Lane)

	// The slot: for a reservation, Slot (Exact: the slot Redis granted,
	// on its clock; else the one the local fallback granted, or r.Time()
	// when the server's slot could not be read), and Placed, r.Time().
	// A Wait gives no reservation: its slot lies somewhere in [Lo, Hi].
	Slot   int64 `json:"slot,omitempty"`
	Exact  bool  `json:"exact,omitempty"`
	Placed int64 `json:"placed,omitempty"`
	Lo     int64 `json:"lo"`
	Hi     int64 `json:"hi"`
	Grant  int64 `json:"grant"`           // when the reservation was asked for
	First  int64 `json:"first,omitempty"` // the slot the reservation got first (Sleep may move it)
	Seq    int64 `json:"seq,omitempty"`   // its number on the key (0: local)
	Fire   int64 `json:"fire"`            // when Sleep (or Wait) returned
	Local  bool  `json:"local,omitempty"`

	// Ran is when Redis ran the script that booked the slot (Unix ns; 0:
	// not known, or booked otherwise), and Share the fleet share it was
	// booked at (ARGV[2]'s; "" not known): a reservation's, for a reader
	// of the dump (granted.Booked). The verdict does not use them.
	Ran   int64  `json:"ran,omitempty"`
	Share string `json:"share,omitempty"`

	Cost   map[string]float64 `json:"cost"`             // reserved
	Settle bool               `json:"settle,omitempty"` // settled to the actual after the reply
	Hold   int64              `json:"hold,omitempty"`   // KeySeats: how long the provider is to hold the call, ns

	// Filled in by the provider.
	Arrive int64   `json:"arrive"`
	Status int     `json:"status"`
	Actual float64 `json:"actual,omitempty"` // tokens used (policy key, status 200)
	Retry  int64   `json:"retry,omitempty"`  // a 429's Retry-After, ns
	Why    string  `json:"why,omitempty"`    // a 429's reason: limit, pause, announced
	Band   string  `json:"band,omitempty"`   // the band that refused, for limit
	// KeySeats (seats.go): when the call ended at the provider (its
	// response written, or its caller's connection closed: Gone), the
	// seats open there at its arrival with it (or, refused, with it
	// counted), and the provider's order of arrivals and ends (ASeq,
	// ESeq: one counter), which the verdict's sweep replays.
	End  int64 `json:"end,omitempty"`
	Gone bool  `json:"gone,omitempty"`
	Open int   `json:"open,omitempty"`
	ASeq int64 `json:"aseq,omitempty"`
	ESeq int64 `json:"eseq,omitempty"`
}

// Reply is the provider's answer to a Call.
type Reply struct {
	Status int     `json:"status"`
	Actual float64 `json:"actual,omitempty"`
	Retry  int64   `json:"retry,omitempty"`
	Arrive int64   `json:"arrive"`
	Why    string  `json:"why,omitempty"`

	count *windowCount // KeyHTTP: its window's count, sent in headers
}

// Note is a line a fleet process prints on stdout: what the provider does
// not see. Type says which fields are set.
type Note struct {
	Type   string           `json:"t"` // see the note* constants
	Child  string           `json:"c,omitempty"`
	Key    string           `json:"k,omitempty"`
	ID     string           `json:"id,omitempty"` // the call a pause or settle belongs to
	At     int64            `json:"at,omitempty"` // when it started (Unix ns)
	End    int64            `json:"end,omitempty"`
	D      int64            `json:"d,omitempty"` // a pause's length, ns
	Op     string           `json:"op,omitempty"`
	Err    string           `json:"err,omitempty"`
	To     string           `json:"to,omitempty"` // a switch: "local" or "redis"
	Counts map[string]int64 `json:"n,omitempty"`
	// Attrs: a move's or a shift's attributes, as the limiter logged them
	// (from_ns, seq, to_ns, to_seq, local, d_ns, resume).
	Attrs map[string]string `json:"a,omitempty"`
	Rate  float64           `json:"r,omitempty"`   // a rate sample: the learned rate, units/s
	Pid   int               `json:"pid,omitempty"` // ready: the process's PID
	Lim   string            `json:"lim,omitempty"` // ready: its Limiter's id (seat tickets start with it)
}

const (
	noteReady  = "ready"  // the limiter is built: waiting for the start
	noteSwitch = "switch" // the limiter switched to local pacing or back
	notePause  = "pause"  // a 429 made the child pause the key
	noteSettle = "settle" // a reservation settled to the provider's actual
	noteErr    = "err"    // an error from the limiter
	noteMove   = "move"   // a sleeper moved, a resume moved it earlier, or the fleet view changed (Op: which)
	noteDone   = "done"   // the child's counts, last
	noteUnsent = "unsent" // an adaptive call pacehttp failed before sending it (ID; Op: too-long, deadline or err)
	noteRate   = "rate"   // a sample of KeyAdaptive's learned rate (Rate), At when read
	// noteUnavail: a call of a caller who can wait (no maximum wait, no
	// deadline of its own) failed with ErrUnavailable (Op: its kind).
	noteUnavail = "unavailable"
	// noteRefused: a fair call with a deadline of its own (D) refused at
	// End, asked for At (Op: the binding band; Attrs: tenant, wait_ns).
	noteRefused = "refused"
	// noteTooLong: a call whose only deadline is the run's end, more than
	// 5 s away, refused at At for a wait of D (Op: its kind; Err).
	noteTooLong = "too-long"
	// noteClose: the process closed its Limiter on the runner's command
	// (At to End; Err, Close's error).
	noteClose = "close"
)

// noteWriter prints notes on stdout, one write per line, so that a process
// killed by SIGKILL loses none it printed.
type noteWriter struct {
	mu sync.Mutex
}

func (w *noteWriter) print(n Note) {
	b, err := json.Marshal(n)
	if err != nil {
		panic(err) // a Note always marshals
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	_, _ = os.Stdout.Write(append(b, '\n'))
}
