package engagement

import (
	"context"
	"fmt"
	"hash/fnv"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/smartfeed/smartfeed/zen"
)

// Arm names of an Experiment.
const (
	// ArmDefault scores with the worker's configured weights (the control).
	ArmDefault = "default"
	// ArmLearned scores with the model file (the treatment).
	ArmLearned = "learned"
)

// Experiment splits users between the default scorer and a learned model: a user is in
// ArmLearned when the stable hash of (Salt, user) falls in the first LearnedPercent of 100
// buckets. The hash is FNV-1a 64 of the salt, a colon and the user's decimal ID, so every
// process, and every run, puts a user in the same arm; changing the salt reshuffles the users.
type Experiment struct {
	Salt           string
	LearnedPercent int
}

// Validate refuses a percentage outside [0, 100].
func (e Experiment) Validate() error {
	if e.LearnedPercent < 0 || e.LearnedPercent > 100 {
		return fmt.Errorf("experiment: learned percent %d not in [0, 100]", e.LearnedPercent)
	}
	return nil
}

// Bucket is user's bucket in [0, 100).
func (e Experiment) Bucket(user zen.ID) int {
	h := fnv.New64a()
	_, _ = h.Write([]byte(e.Salt))
	_, _ = h.Write([]byte{':'})
	_, _ = h.Write(strconv.AppendUint(nil, uint64(user), 10))
	return int(h.Sum64() % 100)
}

// ArmOf returns user's arm.
func (e Experiment) ArmOf(user zen.ID) string {
	if e.Bucket(user) < e.LearnedPercent {
		return ArmLearned
	}
	return ArmDefault
}

// Live is the learned model in use, read from a file and swapped while serving: Reload (or
// Watch, on a change of the file) installs a new file's model only when it parses and
// validates; a refused file leaves the model in use serving. It is safe for concurrent use.
type Live struct {
	path  string
	model atomic.Pointer[Model]

	mu       sync.Mutex
	stamp    string // size and modification time of the file last read
	OnChange func(m *Model, err error)
}

// NewLive returns the holder of the model at path. It loads the file once: an error (the file
// is absent or refused) is returned with a holder that has no model yet.
func NewLive(path string) (*Live, error) {
	l := &Live{path: path}
	return l, l.Reload()
}

// Path returns the model file's path.
func (l *Live) Path() string { return l.path }

// Model returns the model in use, nil when none was ever loaded.
func (l *Live) Model() *Model {
	if l == nil {
		return nil
	}
	return l.model.Load()
}

// Reload reads the file and installs its model. On an error the model in use stays.
func (l *Live) Reload() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	st, err := os.Stat(l.path)
	if err == nil {
		l.stamp = fmt.Sprint(st.Size(), st.ModTime().UnixNano())
	}
	m, err := LoadModel(l.path)
	if err != nil {
		l.notify(nil, err)
		return err
	}
	l.model.Store(m)
	l.notify(m, nil)
	return nil
}

func (l *Live) notify(m *Model, err error) {
	if l.OnChange != nil {
		l.OnChange(m, err)
	}
}

// Watch reloads the file whenever its size or modification time changes, checking every
// interval, until ctx ends.
func (l *Live) Watch(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		st, err := os.Stat(l.path)
		if err != nil {
			continue
		}
		l.mu.Lock()
		changed := fmt.Sprint(st.Size(), st.ModTime().UnixNano()) != l.stamp
		l.mu.Unlock()
		if changed {
			_ = l.Reload()
		}
	}
}
