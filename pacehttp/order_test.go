package pacehttp_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pacer-go/pacer/internal/hook"
	"github.com/pacer-go/pacer/pacehttp"
	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The provider's count is one more constraint on a call, never a way around
// the Limit or a pause: a call waits for the count first, then takes its
// slot of the Limit and sleeps to it (Reservation.Sleep, which never
// returns into a pause), and only then is it sent. These tests judge the
// slots and send times recorded through hook.Sending against Redis's own
// times (the count's window end, the pause), not against a timing bound.

// sent is a call as hook.Sending saw it: its slot and when it was sent.
type sent struct{ slot, at time.Time }

// recordSends records the calls sent to host (hook.Sending) until the test
// ends.
func recordSends(t *testing.T, host string) func() []sent {
	var (
		mu  sync.Mutex
		out []sent
	)
	hook.Sending = func(req *http.Request, r any) {
		if req.URL.Host != host {
			return
		}
		s := sent{slot: r.(*reserve.Reservation).Time(), at: time.Now()}
		mu.Lock()
		out = append(out, s)
		mu.Unlock()
	}
	t.Cleanup(func() { hook.Sending = nil })
	return func() []sent {
		mu.Lock()
		defer mu.Unlock()
		return append([]sent(nil), out...)
	}
}

// exhaustedThenWindow is a provider whose first answer says no call is left
// for a second (x-ratelimit-remaining 0, x-ratelimit-reset 1), and whose
// later answers open a window of 100 calls per 5 s.
func exhaustedThenWindow(t *testing.T) *httptest.Server {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i := n.Add(1)
		left, reset := int64(0), "1"
		if i > 1 {
			left, reset = max(0, 100-(i-1)), "5"
		}
		w.Header().Set("X-RateLimit-Remaining", strconv.FormatInt(left, 10))
		w.Header().Set("X-RateLimit-Reset", reset)
		io.WriteString(w, "ok")
	}))
	t.Cleanup(srv.Close)
	return srv
}

// countEnd returns the end of key's count's window, as the count keeps it
// in Redis (lua/quota.lua's field e, Unix ms).
func countEnd(t *testing.T, rdb redis.UniversalClient, l *reserve.Limiter, key string) time.Time {
	e, err := rdb.HGet(context.Background(), l.RedisKey(key)+":quota", "e").Float64()
	require.NoError(t, err)
	return time.UnixMicro(int64(e * 1000))
}

// getEach sends n GETs to url through c at once and waits for them.
func getEach(t *testing.T, c *http.Client, url string, n int) {
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			resp, err := c.Get(url)
			if assert.NoError(t, err) {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
	wg.Wait()
}

// TestCountsKeepTheLimit: calls held by the count until its window ends are
// sent on slots of the Limit taken after that end, so the new window's
// first calls (a tenth of the calls left, at once for the count) keep the
// Limit's spacing. Before, they had slept to slots taken before the end,
// then waited for the count, and went together: 10 within a millisecond
// where the Limit (40/s, burst 2) allows 2.
func TestCountsKeepTheLimit(t *testing.T) {
	ls, rdb := fleetOn(t, 1)
	srv := exhaustedThenWindow(t)
	host := strings.TrimPrefix(srv.URL, "http://")
	limit := reserve.Limit{Rate: 40, Burst: 2}
	c := &http.Client{Transport: transport(t, ls[0], pacehttp.Options{Limit: limit, MaxRetries: -1})}
	resp, err := c.Get(srv.URL)
	require.NoError(t, err)
	resp.Body.Close()
	end := countEnd(t, rdb, ls[0], host)
	sends := recordSends(t, host)

	getEach(t, c, srv.URL, 12)

	got := sends()
	require.Len(t, got, 12)
	for i, s := range got {
		// The count's end is kept to the microsecond (%.3f ms); a slot
		// is never earlier than Redis granted it.
		assert.False(t, s.slot.Before(end.Add(-time.Microsecond)),
			"call %d: sent on a slot %v before the count's window ended: taken before the count's wait", i+1, end.Sub(s.slot))
	}
	slots := make([]time.Time, len(got))
	ats := make([]time.Time, len(got))
	for i, s := range got {
		slots[i], ats[i] = s.slot, s.at
	}
	t.Logf("the busiest 10 ms: %d slots, %d sends; the busiest 100 ms: %d slots, %d sends (the Limit allows %d and %d)",
		busiest(slots, 10*time.Millisecond), busiest(ats, 10*time.Millisecond),
		busiest(slots, 100*time.Millisecond), busiest(ats, 100*time.Millisecond), 2, 6)
}

// TestCountsKeepThePause: calls held by the count are not sent into a pause
// another process made while they waited. Before, the calls had slept to
// their slots before the pause, waited for the count (its window ended
// inside the pause), and were sent at once, inside it.
func TestCountsKeepThePause(t *testing.T) {
	ls, _ := fleetOn(t, 2)
	srv := exhaustedThenWindow(t)
	host := strings.TrimPrefix(srv.URL, "http://")
	c := &http.Client{Transport: transport(t, ls[0], pacehttp.Options{Limit: reserve.Limit{Rate: 40, Burst: 2}, MaxRetries: -1})}
	resp, err := c.Get(srv.URL)
	require.NoError(t, err)
	resp.Body.Close()
	sends := recordSends(t, host)

	done := make(chan struct{})
	go func() {
		defer close(done)
		getEach(t, c, srv.URL, 9)
	}()
	// The calls wait for the count (a second); another process pauses the
	// host meanwhile, beyond the count's end.
	time.Sleep(200 * time.Millisecond)
	const pause = 2 * time.Second
	from := time.Now()
	require.NoError(t, ls[1].Pause(context.Background(), host, pause))
	made := time.Now()
	<-done

	// The pause runs from when Redis made it (between from and made) for
	// 2 s: [made, from+2s) lies inside it, whatever the machine's speed.
	got := sends()
	require.Len(t, got, 9)
	for i, s := range got {
		assert.False(t, !s.at.Before(made) && s.at.Before(from.Add(pause)),
			"call %d was sent %v into the pause", i+1, s.at.Sub(made))
	}
}

// busiest returns the most of times in any window of length w.
func busiest(times []time.Time, w time.Duration) int {
	most := 0
	for _, a := range times {
		n := 0
		for _, b := range times {
			if !b.Before(a) && b.Sub(a) < w {
				n++
			}
		}
		most = max(most, n)
	}
	return most
}
