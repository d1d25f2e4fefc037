package lint

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestNoSleepSynchronization holds the tests to waiting on conditions, not on time: every
// time.Sleep in a _test.go file is inside a loop (polling a condition, pacing a load) or says
// with SleepMark why the passage of real time is itself the point.
func TestNoSleepSynchronization(t *testing.T) {
	found, err := BareSleeps(moduleRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range found {
		t.Errorf("%s: time.Sleep outside a loop: wait on the condition instead (poll it in a loop, or use a channel), or say why the time itself matters with a %q comment", b, "// "+SleepMark)
	}
}

// TestBareSleepsFixture shows what the rule flags and what it lets stand.
func TestBareSleepsFixture(t *testing.T) {
	dir := t.TempDir()
	write := fileWriter(t, dir)
	write("go.mod", "module example.com/m\n")
	write("a/a_test.go", `package a

import (
	"testing"
	"time"
)

func TestBare(t *testing.T) {
	time.Sleep(time.Second)
}

func TestPolls(t *testing.T) {
	for !done() {
		time.Sleep(time.Millisecond)
	}
	for range 3 {
		go func() {
			time.Sleep(time.Millisecond)
		}()
	}
}

func TestMarked(t *testing.T) {
	// sleep: the 1 ms TTL under test expires
	time.Sleep(2 * time.Millisecond)
	time.Sleep(time.Millisecond) // sleep: the deadline passes
}

func done() bool { return true }
`)
	write("a/renamed_test.go", "package a\n\nimport (\n\t\"testing\"\n\tclock \"time\"\n)\n\nfunc TestRenamed(t *testing.T) { clock.Sleep(1) }\n")
	write("a/prod.go", "package a\n\nimport \"time\"\n\nfunc Wait() { time.Sleep(1) }\n")
	write("a/testdata/x_test.go", "package x\n\nimport \"time\"\n\nfunc X() { time.Sleep(1) }\n")
	got, err := BareSleeps(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []BareSleep{
		{Pos: "a/a_test.go:9", Func: "TestBare", line: 9},
		{Pos: "a/a_test.go:18", Func: "TestPolls", line: 18},
		{Pos: "a/renamed_test.go:8", Func: "TestRenamed", line: 8},
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(BareSleep{})); diff != "" {
		t.Errorf("BareSleeps (-want +got):\n%s", diff)
	}
}
