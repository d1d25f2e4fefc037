package engagement

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
)

// Examples reads the whole impression log as training examples.
func (s *Store) Examples(ctx context.Context) ([]Example, error) {
	var ex []Example
	err := s.ScanLog(ctx, func(r LogRow) error {
		ex = append(ex, ExampleOf(r))
		return nil
	})
	return ex, err
}

// WriteModel writes m into dir as model-v<version>.json, atomically (a temporary file renamed
// over it), so a worker watching the path never reads half a file. It refuses to replace an
// existing version, and returns the path written.
func WriteModel(dir string, m *Model) (string, error) {
	b, err := m.Marshal()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("write model: %w", err)
	}
	path := filepath.Join(dir, fmt.Sprintf("model-v%d.json", m.Version))
	if _, err := os.Stat(path); err == nil {
		return "", fmt.Errorf("write model: %s exists: versions are never overwritten", path)
	}
	tmp, err := os.CreateTemp(dir, ".model-*.json")
	if err != nil {
		return "", fmt.Errorf("write model: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return "", fmt.Errorf("write model: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return "", fmt.Errorf("write model: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return "", fmt.Errorf("write model: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return "", fmt.Errorf("write model: %w", err)
	}
	return path, nil
}

// Install copies the model at path to target atomically (the file a worker's
// engagement.model_file names), so the worker reloads it at its next check.
func Install(path, target string) error {
	m, err := LoadModel(path)
	if err != nil {
		return err
	}
	b, err := m.Marshal()
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(target), ".model-*.json")
	if err != nil {
		return fmt.Errorf("install model: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("install model: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("install model: %w", err)
	}
	if err := os.Rename(tmp.Name(), target); err != nil {
		return fmt.Errorf("install model: %w", err)
	}
	return nil
}
