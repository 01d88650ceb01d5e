//go:build unix

package asynqtest

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// lockMachine holds a lock file shared by every test binary on the machine
// until t ends. go test runs packages in parallel, and these tests measure
// timing: on a small machine, two fleets of asynq servers running at once
// would slow each other down and make handlers wake late.
func lockMachine(t testing.TB) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(os.TempDir(), "pacer-asynqtest.lock"), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		t.Fatalf("asynqtest: lock: %v", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		_ = f.Close()
		t.Fatalf("asynqtest: lock: %v", err)
	}
	t.Cleanup(func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		_ = f.Close()
	})
}
