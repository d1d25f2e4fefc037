package config

import (
	"encoding/json"
	"fmt"
	"reflect"
)

// Masked returns c as indented JSON with every field tagged secret:"true" replaced by "****"
// when it is set.
func (c Config) Masked() string {
	m := c
	maskSecrets(reflect.ValueOf(&m).Elem())
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fmt.Sprintf("<config: %v>", err)
	}
	return string(b)
}

// MaskedCompact is Masked on one line (a log field).
func (c Config) MaskedCompact() string {
	m := c
	maskSecrets(reflect.ValueOf(&m).Elem())
	b, err := json.Marshal(m)
	if err != nil {
		return "null"
	}
	return string(b)
}

func maskSecrets(v reflect.Value) {
	t := v.Type()
	for i := range t.NumField() {
		f := v.Field(i)
		switch {
		case f.Kind() == reflect.Struct:
			maskSecrets(f)
		case t.Field(i).Tag.Get("secret") == "true" && f.Kind() == reflect.String && f.String() != "":
			f.SetString("****")
		}
	}
}
