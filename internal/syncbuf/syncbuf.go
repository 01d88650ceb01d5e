// Package syncbuf is a bytes.Buffer that goroutines may write and read at
// once: a child process's output copied by one goroutine while a test reads
// it, or progress printed by timers during a run.
package syncbuf

import (
	"bytes"
	"sync"
)

// A Buffer is a bytes.Buffer guarded by a mutex. The zero value is empty
// and ready to use.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns what was written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
