package testenv_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/smartfeed/smartfeed/internal/testenv"
)

// TestHelperProcess is run as a child by TestContract; on its own it does nothing.
func TestHelperProcess(t *testing.T) {
	switch os.Getenv("TESTENV_HELPER") {
	case "redis":
		t.Logf("addr=%s", testenv.Redis(t))
	case "hbase":
		t.Logf("addr=%s", testenv.HBase(t))
	case "chromium":
		t.Logf("chromium=%s", testenv.Chromium(t))
	}
}

// TestContract checks the skip / fail / pass behaviour in a child test process.
func TestContract(t *testing.T) {
	cases := []struct {
		name    string
		env     []string
		short   bool
		wantErr bool
		want    string
	}{
		{"redis set", []string{"TESTENV_HELPER=redis", "SMARTFEED_REDIS_ADDR=127.0.0.1:1"}, false, false, "addr=127.0.0.1:1"},
		{"hbase set", []string{"TESTENV_HELPER=hbase", "SMARTFEED_HBASE_ZK=127.0.0.1:2"}, false, false, "addr=127.0.0.1:2"},
		{"redis unset fails", []string{"TESTENV_HELPER=redis"}, false, true, "run make test, or set SMARTFEED_REDIS_ADDR"},
		{"hbase unset fails", []string{"TESTENV_HELPER=hbase"}, false, true, "run make test, or set SMARTFEED_HBASE_ZK"},
		{"redis opt-out skips", []string{"TESTENV_HELPER=redis", "SMARTFEED_NO_REDIS=1"}, false, false, "SMARTFEED_NO_REDIS=1 is set"},
		{"hbase opt-out skips", []string{"TESTENV_HELPER=hbase", "SMARTFEED_NO_HBASE=1", "SMARTFEED_HBASE_ZK=x:1"}, false, false, "SMARTFEED_NO_HBASE=1 is set"},
		{"short skips", []string{"TESTENV_HELPER=hbase"}, true, false, "-short is set"},
		{"chromium set", []string{"TESTENV_HELPER=chromium", "SMARTFEED_CHROMIUM=/opt/c"}, false, false, "chromium=/opt/c"},
		{"chromium not installable skips, saying why", []string{"TESTENV_HELPER=chromium", "SMARTFEED_NO_CHROMIUM=apt-get failed",
			"SMARTFEED_CHROMIUM=/opt/c"}, false, false, `Chromium is not installable here (SMARTFEED_NO_CHROMIUM="apt-get failed")`},
		{"chromium missing fails", []string{"TESTENV_HELPER=chromium", "PATH=/nonexistent"}, false, true,
			"SMARTFEED_CHROMIUM is not set and none is on PATH"},
		{"chromium short skips", []string{"TESTENV_HELPER=chromium"}, true, false, "-short is set"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			args := []string{"-test.run=^TestHelperProcess$", "-test.v"}
			if c.short {
				args = append(args, "-test.short")
			}
			cmd := exec.Command(os.Args[0], args...)
			var env []string
			for _, kv := range os.Environ() {
				if !strings.HasPrefix(kv, "SMARTFEED_") && !strings.HasPrefix(kv, "TESTENV_") {
					env = append(env, kv)
				}
			}
			cmd.Env = append(env, c.env...)
			out, err := cmd.CombinedOutput()
			if (err != nil) != c.wantErr {
				t.Fatalf("err = %v, want error %v; output:\n%s", err, c.wantErr, out)
			}
			if !strings.Contains(string(out), c.want) {
				t.Fatalf("output lacks %q:\n%s", c.want, out)
			}
		})
	}
}
