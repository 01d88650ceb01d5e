package profile_test

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/pacer-go/pacer/internal/provider"
	"github.com/pacer-go/pacer/pacehttp"
	"github.com/pacer-go/pacer/pacertest"
	"github.com/pacer-go/pacer/profile"
	"github.com/pacer-go/pacer/reserve"
)

// handlerTransport serves every request with h, in-process (no network),
// so that calls run in a synctest bubble.
type handlerTransport struct{ h http.Handler }

func (ht handlerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if err := req.Context().Err(); err != nil {
		return nil, err
	}
	rec := httptest.NewRecorder()
	ht.h.ServeHTTP(rec, req)
	if req.Body != nil {
		io.Copy(io.Discard, req.Body)
		req.Body.Close()
	}
	resp := rec.Result()
	resp.Request = req
	return resp, nil
}

// TestGeminiDailyQuota: the Gemini profile's pacehttp options on a fleet
// of 2 Limiters sharing a pacertest Store (pacer's scripts in-process, in
// a synctest bubble's time), 2 workers each with endless demand, against
// a Google-like API (internal/provider.Google) allowing 10 requests a
// minute and 20 a day, the day from midnight to midnight in Los Angeles,
// and a 429 with Google's body beyond: for 6 days across 2000-04-02 (23
// hours long) and 5 days across 2000-10-29 (25 hours), no call is
// refused and every whole day's 20 calls are made (the goal:
// ≥ 99% of the day's quota, 0 rejections).
func TestGeminiDailyQuota(t *testing.T) {
	la, err := time.LoadLocation("America/Los_Angeles")
	if err != nil {
		t.Skip("no zone database:", err)
	}
	const rpd = 20
	p, err := profile.Gemini(profile.GeminiLimits{Project: "p", Model: "gemini-2.0-flash", RPM: 10, TPM: 100_000, RPD: rpd}, profile.Settings{})
	if err != nil {
		t.Fatal(err)
	}
	synctest.Test(t, func(t *testing.T) {
		google := &provider.Google{PerMinute: 10, TokensPerMinute: 100_000, PerDay: rpd}
		store := pacertest.NewStore()
		var clients []*http.Client
		for range 2 {
			lim, err := store.NewLimiter(reserve.Options{Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			defer lim.Close()
			o := p.Options()
			o.Base, o.Logger = handlerTransport{google}, quiet
			tr, err := pacehttp.New(lim, o)
			if err != nil {
				t.Fatal(err)
			}
			clients = append(clients, &http.Client{Transport: tr})
		}
		// run has the workers call until end, from the bubble's now.
		run := func(end time.Time) {
			var wg sync.WaitGroup
			for i, c := range clients {
				for g := range 2 {
					rng := rand.New(rand.NewPCG(uint64(i), uint64(g)))
					wg.Go(func() {
						for time.Now().Before(end) {
							n := 20 + rng.IntN(181)
							ctx := profile.WithCall(context.Background(), profile.Call{Input: off(rng, float64(n))})
							req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.0-flash:generateContent", strings.NewReader(`{}`))
							req.Header.Set("X-Prompt-Tokens", fmt.Sprint(n))
							resp, err := c.Do(req)
							if err != nil {
								t.Error(err)
								return
							}
							io.Copy(io.Discard, resp.Body)
							resp.Body.Close()
						}
					})
				}
			}
			wg.Wait()
		}
		spans := [][2]time.Time{
			{time.Date(2000, 3, 30, 0, 0, 0, 0, la), time.Date(2000, 4, 5, 0, 0, 0, 0, la)},
			{time.Date(2000, 10, 27, 0, 0, 0, 0, la), time.Date(2000, 11, 1, 0, 0, 0, 0, la)},
		}
		for _, s := range spans {
			time.Sleep(time.Until(s[0]))
			run(s[1])
		}

		perDay := map[string]int{}
		refused := 0
		for _, c := range google.Calls() {
			if !c.Accepted {
				refused++
				t.Errorf("refused at %v: %s", c.At.In(la), c.Quota)
				continue
			}
			perDay[c.At.In(la).Format(time.DateOnly)]++
		}
		days, short := 0, 0
		for _, s := range spans {
			for d := s[0]; d.Before(s[1]); d = d.AddDate(0, 0, 1) {
				days++
				got := perDay[d.Format(time.DateOnly)]
				if float64(got) < 0.99*rpd || got > rpd {
					short++
					t.Errorf("%s (%v long): %d of %d calls", d.Format(time.DateOnly), d.AddDate(0, 0, 1).Sub(d), got, rpd)
				}
			}
		}
		t.Logf("%d whole days in Los Angeles (2000-04-02: %d calls in 23 h, 2000-10-29: %d in 25 h), %d short of 99%% of %d, %d refused by the provider",
			days, perDay["2000-04-02"], perDay["2000-10-29"], short, rpd, refused)
	})
}
