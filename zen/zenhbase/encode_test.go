package zenhbase

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestEncodeValue(t *testing.T) {
	tests := []struct{ in, stored string }{
		{"", "\x00"},
		{"a", "a\x00"},
		{"1234567", "1234567\x00\x00"},
		{"12345678", "12345678"},
		{"123456789", "123456789\x00"},
		{"\x00", "\x00\x00"},
	}
	for _, tt := range tests {
		got := encodeValue([]byte(tt.in))
		if string(got) != tt.stored {
			t.Errorf("encodeValue(%q) = %q, want %q", tt.in, got, tt.stored)
		}
		back, err := decodeValue(got)
		if err != nil || string(back) != tt.in {
			t.Errorf("decodeValue(%q) = %q, %v; want %q", got, back, err, tt.in)
		}
	}
	for _, bad := range []string{"", "1234567\x00\x01", "ab"} {
		if v, err := decodeValue([]byte(bad)); err == nil {
			t.Errorf("decodeValue(%q) = %q, want an error", bad, v)
		}
	}
}

func FuzzValueEncoding(f *testing.F) {
	for _, s := range []string{"", "a", "1234567", "12345678", "123456789", "\x00\x00"} {
		f.Add([]byte(s), []byte("x"))
	}
	f.Fuzz(func(t *testing.T, a, b []byte) {
		ea, eb := encodeValue(a), encodeValue(b)
		if len(ea) == 0 {
			t.Fatalf("encodeValue(%q) is empty", a)
		}
		if (len(a) == 8) != (len(ea) == 8) {
			t.Fatalf("encodeValue(%q) = %q: 8-byte values must be stored raw and only they", a, ea)
		}
		if bytes.Equal(ea, eb) != bytes.Equal(a, b) {
			t.Fatalf("encoding not injective: %q→%q, %q→%q", a, ea, b, eb)
		}
		back, err := decodeValue(ea)
		if err != nil || !bytes.Equal(back, a) {
			t.Fatalf("round trip of %q = %q, %v", a, back, err)
		}
		// Any stored cell either decodes or is refused, never panics.
		_, _ = decodeValue(a)
	})
}

func TestSplitKeys(t *testing.T) {
	got := SplitKeys(256, 4096)
	if len(got) != 15 {
		t.Fatalf("SplitKeys(256, 4096) has %d keys, want 15 (16 regions)", len(got))
	}
	for i, k := range got {
		id := binary.BigEndian.Uint64(k)
		if shard := id >> 46; shard != uint64(256*(i+1)) || id&(1<<46-1) != 0 || len(k) != 8 {
			t.Errorf("split %d = %x: shard %d", i, k, shard)
		}
	}
	if d := cmp.Diff([][]byte{{0x00, 0x10, 0, 0, 0, 0, 0, 0}}, SplitKeys(64, 128)); d != "" {
		t.Errorf("SplitKeys(64, 128) (-want +got):\n%s", d)
	}
	if got := SplitKeys(0, 4096); got != nil {
		t.Errorf("SplitKeys(0, 4096) = %x, want none", got)
	}
}

func TestOptionsRefused(t *testing.T) {
	for _, o := range []Options{{TablePrefix: "a-b"}, {Family: "f:x"}, {CallTimeout: -1}, {Shards: 1 << 17}, {RPCQueueSize: -2}} {
		if _, err := Open(t.Context(), "127.0.0.1:1", o); err == nil {
			t.Errorf("Open with %+v succeeded", o)
		}
	}
	if _, err := Open(t.Context(), "", Options{}); err == nil {
		t.Error("Open with an empty quorum succeeded")
	}
}
