package pacehttp_test

import (
	"fmt"
	"time"

	"github.com/pacer-go/pacer/pacehttp"
)

// A provider's body says what its headers do not: Gemini's 429 names a
// quota per day (its RetryInfo's 43 s would only meet the next refusal),
// which resets at midnight Pacific time, 23 hours after the last on the
// day the clocks go forward; Shopify's THROTTLED, sent with status 200,
// waits for the points its bucket lacks.
func ExampleParseBody() {
	gemini := `{"error":{"code":429,"status":"RESOURCE_EXHAUSTED","details":[` +
		`{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"quotaId":"GenerateRequestsPerDayPerProjectPerModel-FreeTier","quotaValue":"1500"}]},` +
		`{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"43s"}]}}`
	now := time.Date(2026, 3, 8, 0, 30, 0, 0, pacehttp.Pacific())
	a, _ := pacehttp.ParseBody([]byte(gemini), now, nil)
	fmt.Println(a.Source, a.Quota, a.Wait)

	shopify := `{"errors":[{"message":"Throttled","extensions":{"code":"THROTTLED"}}],` +
		`"extensions":{"cost":{"requestedQueryCost":101,"actualQueryCost":null,` +
		`"throttleStatus":{"maximumAvailable":1000.0,"currentlyAvailable":54,"restoreRate":50.0}}}}`
	a, _ = pacehttp.ParseBody([]byte(shopify), now, nil)
	fmt.Println(a.Source, a.Throttled, a.Wait)
	// Output:
	// google.rpc.QuotaFailure GenerateRequestsPerDayPerProjectPerModel-FreeTier 22h30m0s
	// shopify-throttled true 940ms
}
