package combo

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/pacer-go/pacer/internal/layout"
	"github.com/redis/go-redis/v9"
)

// The runner's watch of KeySeats's seats in Redis: it reads the tickets'
// hash (lua/seats.lua's KEYS[4]: "s:<ticket>" -> "<holder> <cost>" held,
// "w:<ticket>" waiting) and the holders' hash (KEYS[1]: "r:<holder>" ->
// "<limiter id> <Unix ms> <seats>", Redis's count) every seatWatchEvery
// through the run, and keeps a
// snapshot each time it changed; and once more after every fleet process
// has exited. It only reads (HGETALL): no rule of the script is redone
// here. The verdict (seatjudge.go) reads in the snapshots when a killed
// holder's tickets left Redis's count, and in the last read which tickets
// outlived their process.
const seatWatchEvery = 20 * time.Millisecond

// SeatSnap is one read of KeySeats's tickets' and holders' hashes.
type SeatSnap struct {
	At int64 // when the read returned (Unix ns)
	// Held: "<ticket> <holder> <seats>" per ticket holding seats, sorted;
	// Waiting: the tickets waiting.
	Held    []string `json:",omitempty"`
	Waiting []string `json:",omitempty"`
	// Holders: "<holder> <limiter id> <Unix ms> <seats>" per holder of the
	// holders' hash (seats.lua's KEYS[1]): the seats Redis counts. A
	// ticket counts only while its holder's place is its Limiter's, and
	// is dropped lazily: Held may list tickets Holders does not count.
	Holders []string `json:",omitempty"`
	Err     string   `json:",omitempty"` // the read failed (Redis broken)
}

func (s SeatSnap) same(o SeatSnap) bool {
	return slices.Equal(s.Held, o.Held) && slices.Equal(s.Waiting, o.Waiting) && slices.Equal(s.Holders, o.Holders) &&
		(s.Err == "") == (o.Err == "")
}

// seatsKey is KeySeats's tickets' hash under prefix. (Before, the
// holders' hash, KEYS[1], where no ticket is: every read was empty;
// TestReadSeats.)
func seatsKey(prefix string) string { return layout.SeatTickets(prefix, KeySeats) }

// readSeats reads the tickets' hash and the holders' once (in one
// MULTI: the same instant).
func readSeats(ctx context.Context, rdb redis.UniversalClient, prefix string) SeatSnap {
	var tickets, holders *redis.MapStringStringCmd
	seats, _, _ := layout.SeatKeys(prefix, KeySeats)
	_, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		tickets = p.HGetAll(ctx, seatsKey(prefix))
		holders = p.HGetAll(ctx, seats)
		return nil
	})
	s := SeatSnap{At: time.Now().UnixNano()}
	if err != nil {
		s.Err = err.Error()
		return s
	}
	for f, v := range holders.Val() {
		if h, ok := strings.CutPrefix(f, "r:"); ok {
			s.Holders = append(s.Holders, h+" "+v)
		}
	}
	slices.Sort(s.Holders)
	for f, v := range tickets.Val() {
		switch {
		case strings.HasPrefix(f, "s:"):
			s.Held = append(s.Held, f[2:]+" "+v)
		case strings.HasPrefix(f, "w:"):
			s.Waiting = append(s.Waiting, f[2:])
		}
	}
	slices.Sort(s.Held)
	slices.Sort(s.Waiting)
	return s
}

func newSeatClient(at redisAt) redis.UniversalClient {
	return at.client(redis.UniversalOptions{MaxRetries: -1, DialTimeout: 200 * time.Millisecond,
		ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond, PoolSize: 1})
}

// watchSeats keeps the snapshots of the seats hash that changed, until
// ctx ends.
func watchSeats(ctx context.Context, at redisAt, prefix string) []SeatSnap {
	rdb := newSeatClient(at)
	defer rdb.Close()
	var out []SeatSnap
	t := time.NewTicker(seatWatchEvery)
	defer t.Stop()
	for {
		rctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		s := readSeats(rctx, rdb, prefix)
		cancel()
		if ctx.Err() != nil {
			return out
		}
		if len(out) == 0 || !out[len(out)-1].same(s) {
			out = append(out, s)
		}
		select {
		case <-ctx.Done():
			return out
		case <-t.C:
		}
	}
}

// ticketLimiter is the Limiter id a seat ticket starts with
// ("<limiter id>.<number>").
func ticketLimiter(ticket string) string {
	if i := strings.LastIndexByte(ticket, '.'); i > 0 {
		return ticket[:i]
	}
	return ticket
}
