module github.com/pacer-go/pacer/cmd/pacer

go 1.26.0

require (
	github.com/creack/pty v1.1.24
	github.com/pacer-go/pacer v0.1.0
	github.com/redis/go-redis/v9 v9.23.0
	golang.org/x/term v0.46.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
)
