package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestIDCommands(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"id", "decode", "241294492511762325"}, "shard 3429 type 1 (pin) local 7075733\n"},
		{[]string{"id", "decode", "241294561224164665"}, "shard 3429 type 2 (board) local 1337\n"},
		{[]string{"id", "decode", "241294629943640797"}, "shard 3429 type 3 (user) local 733\n"},
		{[]string{"id", "decode", "68719476737"}, "shard 0 type 1 (pin) local 1\n"},
		{[]string{"id", "decode", "481036337153"}, "shard 0 type 7 local 1\n"},
		{[]string{"id", "encode", "--shard", "3429", "--type", "1", "--local", "7075733"}, "241294492511762325\n"},
		{[]string{"id", "encode", "--shard=4095", "--type=board", "--local=1"}, "288160144846487553\n"},
		{[]string{"id", "encode", "--shard", "65535", "--type", "1023", "--local", "68719476735"}, "4611686018427387903\n"},
		{[]string{"modshard", "1.2.3.4"}, "1537\n"},
		{[]string{"modshard", "foo", "--n", "4096"}, "1240\n"},
		{[]string{"modshard", "--n", "4096", "user@example.com"}, "2479\n"},
		{[]string{"modshard", "--", ""}, "638\n"},
		{[]string{"modshard", "--", "--n"}, "1953\n"},
		{[]string{"modshard", "foo", "--n", "1000"}, "560\n"},
	} {
		var out, errOut bytes.Buffer
		if err := run(context.Background(), tc.args, &out, &errOut); err != nil {
			t.Errorf("%v: %v", tc.args, err)
			continue
		}
		if diff := cmp.Diff(tc.want, out.String()); diff != "" {
			t.Errorf("%v (-want +got):\n%s", tc.args, diff)
		}
	}
}

func TestIDCommandsRefuse(t *testing.T) {
	for _, args := range [][]string{
		{"id"},
		{"id", "frobnicate"},
		{"id", "decode"},
		{"id", "decode", "abc"},
		{"id", "decode", "1"},                   // type 0
		{"id", "decode", "4611686018427387904"}, // reserved bit
		{"id", "decode", "1", "2"},
		{"id", "encode", "--shard", "1", "--type", "1"}, // no local
		{"id", "encode", "--shard", "65536", "--type", "1", "--local", "1"}, // shard too big
		{"id", "encode", "--shard", "1", "--type", "0", "--local", "1"},     // type 0
		{"id", "encode", "--shard", "1", "--type", "1024", "--local", "1"},  // type too big
		{"id", "encode", "--shard", "1", "--type", "cat", "--local", "1"},   // unknown name
		{"id", "encode", "--shard", "1", "--type", "1", "--local", "68719476736"},
		{"id", "encode", "--shard", "1", "--type", "1", "--local", "-1"},
		{"id", "encode", "--bogus", "1"},
		{"id", "encode", "--shard", "1", "--type", "1", "--local", "1", "extra"},
		{"modshard"},
		{"modshard", "a", "b"},
		{"modshard", "a", "--n", "0"},
		{"modshard", "a", "--n", "x"},
	} {
		var out, errOut bytes.Buffer
		err := run(context.Background(), args, &out, &errOut)
		if err == nil {
			t.Errorf("%v: no error (printed %q)", args, out.String())
			continue
		}
		if msg := err.Error(); msg == "" || strings.Contains(msg, "\n") {
			t.Errorf("%v: error %q is not one line", args, msg)
		}
		if out.Len() != 0 {
			t.Errorf("%v: printed %q on failure", args, out.String())
		}
	}
}
