package shardwatch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"time"

	"github.com/go-zookeeper/zk"
	"go.uber.org/zap"

	"github.com/smartfeed/smartfeed/zen"
)

// The operator's side: publishing a shard map to its znode, the watchers' acknowledgements of
// it, and the check that the map's peers can be reached.

// Publish validates m and writes it to the znode at zpath (creating it and its parents), the
// way an operator pushes a new shard map to every running process.
func Publish(ctx context.Context, quorum, zpath string, m *zen.ShardMap) error {
	_, err := PublishVersion(ctx, quorum, zpath, m)
	return err
}

// PublishVersion is Publish, and returns the znode's version after the write (for WaitAcks).
func PublishVersion(ctx context.Context, quorum, zpath string, m *zen.ShardMap) (int32, error) {
	b, err := m.MarshalJSON()
	if err != nil {
		return 0, fmt.Errorf("publish shard map: %w", err)
	}
	conn, err := connect(quorum, zap.NewNop())
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	type res struct {
		v   int32
		err error
	}
	done := make(chan res, 1)
	go func() {
		v, err := put(conn, zpath, b)
		done <- res{v, err}
	}()
	select {
	case <-ctx.Done():
		return 0, fmt.Errorf("publish shard map: %w", ctx.Err())
	case r := <-done:
		if r.err != nil {
			return 0, fmt.Errorf("publish shard map to %s: %w", zpath, r.err)
		}
		return r.v, nil
	}
}

// mkdirs creates the parents of zpath (persistent, empty) that do not exist.
func mkdirs(conn *zk.Conn, zpath string) error {
	var parents []string
	for p := path.Dir(zpath); p != "/" && p != "."; p = path.Dir(p) {
		parents = append([]string{p}, parents...)
	}
	for _, p := range parents {
		if _, err := conn.Create(p, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return err
		}
	}
	return nil
}

func put(conn *zk.Conn, zpath string, b []byte) (int32, error) {
	if err := mkdirs(conn, zpath); err != nil {
		return 0, err
	}
	if _, err := conn.Create(zpath, b, 0, zk.WorldACL(zk.PermAll)); err == nil {
		return 0, nil
	} else if !errors.Is(err, zk.ErrNodeExists) {
		return 0, err
	}
	st, err := conn.Set(zpath, b, -1)
	if err != nil {
		return 0, err
	}
	return st.Version, nil
}

// Ack is a process's acknowledgement of a version of the shard map znode.
type Ack struct {
	Version int32 `json:"version"`
	// Applied is false when the process refused the map (it keeps routing by the previous one).
	Applied bool `json:"applied"`
	// Stores are the store names the process knows (a map naming another is refused by it);
	// empty means any name.
	Stores []string `json:"stores,omitempty"`
}

// AckPath is the znode whose ephemeral children are the acknowledgements of the map at zpath.
func AckPath(zpath string) string { return zpath + "-acks" }

func ack(conn *zk.Conn, zpath, id string, a Ack) error {
	b, err := json.Marshal(a)
	if err != nil {
		return err
	}
	p := AckPath(zpath) + "/" + id
	if _, err := conn.Set(p, b, -1); err == nil {
		return nil
	} else if !errors.Is(err, zk.ErrNoNode) {
		return err
	}
	if err := mkdirs(conn, p); err != nil {
		return err
	}
	if _, err := conn.Create(p, b, zk.FlagEphemeral, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
		return err
	}
	return nil
}

// WaitAcks waits until every process acknowledging the map at zpath (its live ephemeral
// acknowledgement znodes) has handled version or a later one, and reports how many did. A
// process that refused that version fails the wait; one whose session ends stops being waited
// for. It polls every 20 ms until ctx is done.
func WaitAcks(ctx context.Context, quorum, zpath string, version int32) (int, error) {
	conn, err := connect(quorum, zap.NewNop())
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	type res struct {
		n       int
		pending []string
		err     error
	}
	poll := func() res {
		ids, _, err := conn.Children(AckPath(zpath))
		if errors.Is(err, zk.ErrNoNode) {
			return res{}
		}
		if err != nil {
			return res{err: err}
		}
		var r res
		for _, id := range ids {
			b, _, err := conn.Get(AckPath(zpath) + "/" + id)
			if errors.Is(err, zk.ErrNoNode) {
				continue // the process went away
			}
			if err != nil {
				return res{err: err}
			}
			var a Ack
			if err := json.Unmarshal(b, &a); err != nil {
				return res{err: fmt.Errorf("acknowledgement %s: %w", id, err)}
			}
			switch {
			case a.Version < version:
				r.pending = append(r.pending, id)
			case a.Version == version && !a.Applied:
				return res{err: fmt.Errorf("process %s refused shard map version %d", id, version)}
			default:
				r.n++
			}
		}
		return r
	}
	for {
		done := make(chan res, 1)
		go func() { done <- poll() }()
		var r res
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("wait for shard map acknowledgements: %w", ctx.Err())
		case r = <-done:
		}
		if r.err != nil {
			return 0, fmt.Errorf("wait for shard map acknowledgements: %w", r.err)
		}
		if len(r.pending) == 0 {
			return r.n, nil
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("wait for shard map version %d: not acknowledged by %v: %w", version, r.pending, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// CheckPeers refuses m when a process acknowledging the map at zpath (a live acknowledgement
// znode) does not know one of the stores m names: published, that map would be refused by the
// process, which would keep routing by its previous one. It names the process and the store.
// Processes that acknowledge nothing are not known to it.
func CheckPeers(ctx context.Context, quorum, zpath string, m *zen.ShardMap) error {
	conn, err := connect(quorum, zap.NewNop())
	if err != nil {
		return err
	}
	defer conn.Close()
	done := make(chan error, 1)
	go func() {
		ids, _, err := conn.Children(AckPath(zpath))
		if errors.Is(err, zk.ErrNoNode) {
			done <- nil
			return
		}
		if err != nil {
			done <- err
			return
		}
		for _, id := range ids {
			b, _, err := conn.Get(AckPath(zpath) + "/" + id)
			if errors.Is(err, zk.ErrNoNode) {
				continue // the process went away
			}
			if err != nil {
				done <- err
				return
			}
			var a Ack
			if err := json.Unmarshal(b, &a); err != nil {
				done <- fmt.Errorf("acknowledgement %s: %w", id, err)
				return
			}
			if len(a.Stores) == 0 {
				continue
			}
			if err := m.CheckStores(a.Stores...); err != nil {
				done <- fmt.Errorf("process %s would refuse it: %w", id, err)
				return
			}
		}
		done <- nil
	}()
	select {
	case <-ctx.Done():
		return fmt.Errorf("check the shard map against the running processes: %w", ctx.Err())
	case err := <-done:
		if err != nil {
			return fmt.Errorf("check the shard map against the running processes: %w", err)
		}
		return nil
	}
}
