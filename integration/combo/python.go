package combo

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// Python processes in the fleet: the Python client (clients/python) paces
// the keys it supports beside the Go processes, through the same provider,
// under the same faults and operator actions, judged by the same verdict.
//
// A seed draws which of the fleet's slots run Python (pythonSlots, from a
// stream of its own: the other draws stay as they were). A process in
// such a slot, and every process started again in it, is a Python child:
// the runner re-runs this binary as for any child, and the child replaces
// itself (execve: the same PID, stdin and stdout) with pythonBin running
// clients/python/tests/combo_child.py, which reads the same ChildSpec,
// prints the same notes and takes the same commands (child.go,
// commands.go). Signals and kills reach it as any child.

// pythonBin is the interpreter of the Python children: Debian's, which has
// redis-py and lupa (clients/python/README.md).
const pythonBin = "/usr/bin/python3"

// pythonScript is the Python child, relative to the repository's root.
var pythonScript = filepath.Join("clients", "python", "tests", "combo_child.py")

// pythonSlots draws the fleet slots that run Python: none, one or two of
// the procs (at least one Go process stays, for the keys only Go calls).
func pythonSlots(seed uint64, procs int) []int {
	rng := rand.New(rand.NewPCG(seed, seed^0x7079746830636f6d)) // "pyth0com"
	n := pick(rng, []int{0, 1, 2}, []int{30, 40, 30})
	n = min(n, procs-1)
	slots := rng.Perm(procs)[:n]
	slices.Sort(slots)
	return slots
}

// pythonCalls reports whether the Python processes call key: the keys the
// client supports (combo_child.py), the Sliding key and the policy key.
func pythonCalls(key string) bool { return key == KeySliding || key == KeyPolicy }

// isPython reports whether slot runs Python in sc.
func (sc Scenario) isPython(slot int) bool { return slices.Contains(sc.Python, slot) }

var (
	pythonOnce   sync.Once
	pythonPath   string // the script's absolute path
	pythonMissed error
)

// findPython returns the Python child's script, once it has checked that
// pythonBin imports redis and lupa (Python 3.11 or later), or why not.
func findPython() (string, error) {
	pythonOnce.Do(func() {
		out, err := exec.Command(pythonBin, "-c", "import redis, lupa, sys; assert sys.version_info >= (3, 11), sys.version").CombinedOutput()
		if err != nil {
			pythonMissed = fmt.Errorf("%s with redis-py and lupa (Debian: python3-redis python3-lupa): %s %v", pythonBin, strings.TrimSpace(string(out)), err)
			return
		}
		dir, err := os.Getwd()
		if err != nil {
			pythonMissed = err
			return
		}
		for {
			if p := filepath.Join(dir, pythonScript); fileExists(p) {
				pythonPath = p
				return
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				pythonMissed = errors.New("no " + pythonScript + " above the working directory")
				return
			}
			dir = parent
		}
	})
	return pythonPath, pythonMissed
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// execPython replaces this process (a fleet child) by the Python child:
// its environment, with the ChildSpec, stays.
func execPython(spec ChildSpec) error {
	err := syscall.Exec(pythonBin, []string{pythonBin, spec.Script}, append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1"))
	return fmt.Errorf("exec %s %s: %w", pythonBin, spec.Script, err)
}

// pythonDraw decides, before a run, whether its Python draw runs: it
// returns the script, or "" and the line that says why the draw is
// skipped; under CI an interpreter missing is an error.
func pythonDraw(sc Scenario) (script, skipped string, err error) {
	if len(sc.Python) == 0 {
		return "", "", nil
	}
	if os.Getenv(pythonEnv) == "off" {
		return "", fmt.Sprintf("the Python draw (%s) is skipped (%s=off): Go processes run in those slots", slotsText(sc.Python), pythonEnv), nil
	}
	script, err = findPython()
	if err == nil {
		return script, "", nil
	}
	if ci := os.Getenv("CI"); ci != "" {
		return "", "", fmt.Errorf("seed %d draws Python processes, which need %v (CI=%q is set, so this is a failure, not a skip)", sc.Seed, err, ci)
	}
	return "", fmt.Sprintf("the Python draw (%s) is skipped: Go processes run in those slots: %v", slotsText(sc.Python), err), nil
}

// pythonEnv=off skips every seed's Python draw (Go processes run in its
// slots): to tell whether a failure needs the Python processes.
const pythonEnv = "PACER_COMBO_PYTHON"

// slotsText names slots as the timeline does (the IDs of their first
// processes: slot 0 is child 1).
func slotsText(slots []int) string {
	var parts []string
	for _, s := range slots {
		parts = append(parts, strconv.Itoa(s+1))
	}
	return "slots " + strings.Join(parts, ",")
}
