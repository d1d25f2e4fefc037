package lint

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// moduleRoot is the repository root: two levels above this file.
func moduleRoot(t *testing.T) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("no caller info")
	}
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// TestImportRules runs the rules over this module.
func TestImportRules(t *testing.T) {
	module, pkgs, err := Load(moduleRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	if module != "github.com/smartfeed/smartfeed" {
		t.Fatalf("module = %q", module)
	}
	if len(pkgs) < 3 {
		t.Fatalf("go list found only %d packages", len(pkgs))
	}
	for _, v := range Check(module, pkgs) {
		t.Error(v)
	}
}

// TestFixtureViolations shows every rule firing on a small module with bad imports.
func TestFixtureViolations(t *testing.T) {
	dir := filepath.Join("testdata", "badmod")
	// The fixture imports gRPC without requiring it: go list -e reports the import anyway and
	// must not reach for the network.
	module, pkgs, err := Load(dir, "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, v := range Check(module, pkgs) {
		t.Log(v)
		got[strings.TrimPrefix(v.Package, module+"/")+" | "+v.Rule] = true
	}
	want := []string{
		"worker | service imports service",         // worker imports feedsvc
		"graphsvc/store | service imports service", // through a non-service package of the module
		"graphsvc | service imports service",       // and so graphsvc itself, transitively
		"zen | zen imports service",                // zen imports worker
		"zen/hbase | zen imports grpc",             // zen/hbase imports grpc
		"zen/hbase | zen imports service",          // zen/hbase imports pinlater
		"feedsvc | imports cmd",                    // feedsvc imports cmd/tool/flags
		"util | banned package name",
		"internal/common | banned package name",
		"graphsvc/shared | banned package name",
	}
	for _, w := range want {
		if !got[w] {
			t.Errorf("missing violation %q", w)
		}
		delete(got, w)
	}
	for extra := range got {
		t.Errorf("unexpected violation %q", extra)
	}
}

// TestCleanFixture: allowed shapes raise nothing (a service using its own subpackages and zen,
// a command using its own internal package).
func TestCleanFixture(t *testing.T) {
	module, pkgs, err := Load(filepath.Join("testdata", "goodmod"), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off")
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range Check(module, pkgs) {
		t.Error(v)
	}
}

// TestCommandsAreWiring runs CheckWiring over this module's commands.
func TestCommandsAreWiring(t *testing.T) {
	vs, err := CheckWiring(moduleRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vs {
		t.Error(v)
	}
}

// TestWiringFixture: a scoring loop, a gRPC service and a compare-and-set protocol in a command
// fire the rules, line by line, and the unit conversions, library calls, stream values and reads
// beside them do not.
func TestWiringFixture(t *testing.T) {
	vs, err := CheckWiring(filepath.Join("testdata", "wiringmod"), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, v := range vs {
		got = append(got, strings.TrimPrefix(v.Package, "example.com/wiringmod/")+" | "+v.Rule+" | "+v.Detail[:strings.Index(v.Detail, ";")])
	}
	want := []string{
		"cmd/tool | computes in cmd | main.go:25: float + of two values",
		"cmd/tool | computes in cmd | main.go:26: float += of a value",
		"cmd/tool | computes in cmd | main.go:27: float / of two values",
		"cmd/tool | protocol in cmd | serve.go:28: (example.com/wiringmod/zen.Table).CheckAndSet",
		"cmd/tool | protocol in cmd | serve.go:31: (example.com/wiringmod/zen.Table).Increment",
		"cmd/tool | serves gRPC in cmd | serve.go:11: type thingService embeds UnimplementedThingServer",
		"cmd/tool | serves gRPC in cmd | serve.go:11: type thingService implements thingv1.ThingServer",
		"cmd/tool | serves gRPC in cmd | serve.go:15: type handWritten implements thingv1.ThingServer",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("violations (-want +got):\n%s", diff)
	}
}

// TestRunDirIsOutsideThePackages checks that go.mod keeps run/, where the local Redis and HBase
// create and remove directories while tests run, out of ./... and out of the rules' own walks:
// a walk of it could find a directory gone and fail every rule.
func TestRunDirIsOutsideThePackages(t *testing.T) {
	root := moduleRoot(t)
	if err := os.MkdirAll(filepath.Join(root, "run"), 0o755); err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp(filepath.Join(root, "run"), "lint-ignore-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.WriteFile(filepath.Join(dir, "x.go"), []byte("package x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, pkgs, err := Load(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pkgs {
		if p.Dir == dir || strings.HasPrefix(p.ImportPath, "./") {
			t.Errorf("go list ./... lists %s (%s): go.mod must ignore ./run", p.ImportPath, p.Dir)
		}
	}
	// The rules that read the files themselves (sizes, sleeps) skip it too.
	err = walkModule(root, func(path, rel string, _ []byte) error {
		if strings.HasPrefix(rel, "run/") {
			t.Errorf("walkModule reads %s: it must skip what go.mod ignores", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
