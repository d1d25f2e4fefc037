package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"sort"
	"strings"

	"github.com/smartfeed/smartfeed/internal/quote"
)

// Load reads a JSON config file over base: fields absent from the file keep base's values.
// Unknown fields are refused.
func Load(path string, base Config) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return base, fmt.Errorf("read config: %w", err)
	}
	c, err := Parse(data, base)
	if err != nil {
		// The path is whole: it names a file that exists (bounded by PATH_MAX), and a cut
		// path would not say which file to fix.
		return base, fmt.Errorf("config file %q: %w", path, err)
	}
	return c, nil
}

// Parse decodes a JSON config over base (see Load). The document must be one JSON object
// (null, an array or a scalar is refused) naming each key once: JSON decoding would keep the
// last of two values, and keys match fields without regard to case, so "Backend" and "backend"
// are the same key.
func Parse(data []byte, base Config) (Config, error) {
	if err := checkKeys(data); err != nil {
		return base, fmt.Errorf("parse config: %w", err)
	}
	if unknown := unknownKeys(data, reflect.TypeFor[Config]()); len(unknown) > 0 {
		// All of them at once: fixing one typo only to be told of the next wastes starts.
		qs := make([]string, len(unknown))
		for i, k := range unknown {
			qs[i] = quote.Q(k)
		}
		noun := "key"
		if len(unknown) > 1 {
			noun = "keys"
		}
		return base, fmt.Errorf("parse config: unknown %s %s: no such setting (the keys are the \"config file key\" column of docs/operations.md)",
			noun, strings.Join(qs, ", "))
	}
	c := base
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return base, fmt.Errorf("parse config: %w", err)
	}
	if dec.More() {
		return base, errors.New("parse config: trailing data after the JSON object")
	}
	return c, nil
}

// checkKeys reports a document that is not a JSON object, or an object (at any depth) that
// names a key twice, case-insensitively; the error names the key's path ("storage.backend",
// quoted and cut to a bounded length).
// Malformed JSON passes, for the decoder to report.
func checkKeys(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	tok, err := dec.Token()
	if err != nil {
		return nil
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return fmt.Errorf("the document is %s, not a JSON object", jsonKind(tok))
	}
	err = checkObject(dec, "")
	if errors.Is(err, errMalformed) {
		return nil
	}
	return err
}

var errMalformed = errors.New("malformed JSON")

// checkObject walks the rest of an object whose '{' dec has read, and of every object in it.
func checkObject(dec *json.Decoder, path string) error {
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return errMalformed
		}
		key, ok := tok.(string)
		if !ok {
			return errMalformed
		}
		name := key
		if path != "" {
			name = path + "." + key
		}
		if seen[strings.ToLower(key)] {
			return fmt.Errorf("key %s appears twice (keys are matched without regard to case)", quote.Q(name))
		}
		seen[strings.ToLower(key)] = true
		if err := checkValue(dec, name); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil { // the closing '}'
		return errMalformed
	}
	return nil
}

// checkValue walks one value, checking the objects in it.
func checkValue(dec *json.Decoder, path string) error {
	tok, err := dec.Token()
	if err != nil {
		return errMalformed
	}
	switch tok {
	case json.Delim('{'):
		return checkObject(dec, path)
	case json.Delim('['):
		for i := 0; dec.More(); i++ {
			if err := checkValue(dec, fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
		if _, err := dec.Token(); err != nil { // the closing ']'
			return errMalformed
		}
	}
	return nil
}

// jsonKind names the kind of the first token of a document.
func jsonKind(tok json.Token) string {
	switch v := tok.(type) {
	case nil:
		return "null"
	case json.Delim:
		if v == '[' {
			return "an array"
		}
	case bool:
		return "a boolean"
	case string:
		return "a string"
	case float64, json.Number:
		return "a number"
	}
	return "not an object"
}

// maxUnknownKeys bounds the unknown keys an error lists.
const maxUnknownKeys = 20

// unknownKeys lists, sorted, the paths ("storage.bogus") of the keys in the JSON object data
// that name no field of t, matching names as encoding/json does (the json tag, without regard
// to case). It looks into objects whose field is a struct (or a map of structs) without its own
// JSON decoding; malformed JSON yields nothing (the decoder reports it).
func unknownKeys(data []byte, t reflect.Type) []string {
	var doc any
	if json.Unmarshal(data, &doc) != nil {
		return nil
	}
	var out []string
	walkUnknown(doc, t, "", &out)
	sort.Strings(out)
	if len(out) > maxUnknownKeys {
		out = append(out[:maxUnknownKeys], fmt.Sprintf("(and %d more)", len(out)-maxUnknownKeys))
	}
	return out
}

var jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()

func walkUnknown(v any, t reflect.Type, path string, out *[]string) {
	obj, ok := v.(map[string]any)
	if !ok {
		return
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Implements(jsonUnmarshaler) || reflect.PointerTo(t).Implements(jsonUnmarshaler) {
		return
	}
	join := func(k string) string {
		if path == "" {
			return k
		}
		return path + "." + k
	}
	switch t.Kind() {
	case reflect.Map:
		for k, sub := range obj {
			walkUnknown(sub, t.Elem(), join(k), out)
		}
		return
	case reflect.Struct:
	default:
		return
	}
	for k, sub := range obj {
		f, ok := jsonField(t, k)
		if !ok {
			*out = append(*out, join(k))
			continue
		}
		walkUnknown(sub, f.Type, join(k), out)
	}
}

// jsonField is the field of struct type t that encoding/json decodes key into.
func jsonField(t reflect.Type, key string) (reflect.StructField, bool) {
	var fold *reflect.StructField
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				if sf, ok := jsonField(ft, key); ok {
					return sf, true
				}
				continue
			}
		}
		if name == "" {
			name = f.Name
		}
		if name == key {
			return f, true
		}
		if fold == nil && strings.EqualFold(name, key) {
			fold = &f
		}
	}
	if fold != nil {
		return *fold, true
	}
	return reflect.StructField{}, false
}
