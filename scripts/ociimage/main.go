// Command ociimage writes the smartfeed container image as an OCI image layout, without a
// container engine: one layer holding the static binary (/usr/local/bin/smartfeed), the
// non-root user 65532 (/etc/passwd, /etc/group), the CA certificates and an empty /data owned
// by that user, on an empty base, with the entrypoint, user, ports and SMARTFEED_DATA_DIR of
// the repository's Dockerfile. scripts/image.sh builds the binary and runs it.
//
//	go run . -bin BINARY -certs /etc/ssl/certs/ca-certificates.crt -tag TAG -out DIR
package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

func main() {
	bin := flag.String("bin", "", "the static smartfeed binary (linux)")
	certs := flag.String("certs", "/etc/ssl/certs/ca-certificates.crt", "PEM bundle of CA certificates")
	tag := flag.String("tag", "dev", "image tag (the org.opencontainers.image.ref.name annotation)")
	version := flag.String("version", "dev", "the org.opencontainers.image.version label")
	arch := flag.String("arch", "amd64", "architecture of the binary")
	out := flag.String("out", "", "directory of the OCI image layout to write (created; must not exist)")
	flag.Parse()
	if *bin == "" || *out == "" {
		fmt.Fprintln(os.Stderr, "usage: ociimage -bin BINARY -out DIR [-tag TAG] [-version V] [-certs FILE] [-arch ARCH]")
		os.Exit(2)
	}
	if err := run(*bin, *certs, *tag, *version, *arch, *out); err != nil {
		fmt.Fprintln(os.Stderr, "ociimage:", err)
		os.Exit(1)
	}
}

func run(bin, certs, tag, version, arch, out string) error {
	if _, err := os.Stat(out); err == nil {
		return fmt.Errorf("%s exists: remove it first", out)
	}
	layerTar, err := rootfs(bin, certs)
	if err != nil {
		return err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return fmt.Errorf("layer: %w", err)
	}
	img, err := mutate.AppendLayers(mutate.MediaType(empty.Image, types.OCIManifestSchema1), layer)
	if err != nil {
		return fmt.Errorf("append layer: %w", err)
	}
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", arch
	cf.Created = v1.Time{Time: time.Unix(0, 0).UTC()} // reproducible: the same inputs, the same digest
	cf.Config = v1.Config{
		Entrypoint:   []string{"/usr/local/bin/smartfeed"},
		Cmd:          []string{"help"},
		User:         "65532:65532",
		WorkingDir:   "/",
		Env:          []string{"SMARTFEED_DATA_DIR=/data", "PATH=/usr/local/bin:/usr/bin:/bin"},
		ExposedPorts: map[string]struct{}{"9090/tcp": {}, "9091/tcp": {}},
		Labels: map[string]string{
			"org.opencontainers.image.title":   "smartfeed",
			"org.opencontainers.image.version": version,
			"org.opencontainers.image.source":  "https://github.com/smartfeed/smartfeed",
		},
	}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	p, err := layout.Write(out, empty.Index)
	if err != nil {
		return fmt.Errorf("write layout: %w", err)
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": tag})); err != nil {
		return fmt.Errorf("write image: %w", err)
	}
	d, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("%s %s\n", tag, d)
	return nil
}

// rootfs is the image's one layer, as a tar: directories, the user files, the certificates
// and the binary, with fixed times and owners so the layer is reproducible.
func rootfs(bin, certs string) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	mtime := time.Unix(0, 0).UTC()
	dir := func(name string, uid int) error {
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: 0o755, Uid: uid, Gid: uid, ModTime: mtime})
	}
	file := func(name string, mode int64, b []byte) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(b)), ModTime: mtime}); err != nil {
			return err
		}
		_, err := tw.Write(b)
		return err
	}
	for _, d := range []string{"etc/", "etc/ssl/", "etc/ssl/certs/", "tmp/", "usr/", "usr/local/", "usr/local/bin/"} {
		if err := dir(d, 0); err != nil {
			return nil, err
		}
	}
	if err := dir("data/", 65532); err != nil {
		return nil, err
	}
	if err := file("etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")); err != nil {
		return nil, err
	}
	if err := file("etc/group", 0o644, []byte("root:x:0:\nnonroot:x:65532:\n")); err != nil {
		return nil, err
	}
	pem, err := os.ReadFile(certs)
	if err != nil {
		return nil, fmt.Errorf("CA certificates: %w", err)
	}
	if err := file("etc/ssl/certs/ca-certificates.crt", 0o644, pem); err != nil {
		return nil, err
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		return nil, fmt.Errorf("binary: %w", err)
	}
	if err := file("usr/local/bin/smartfeed", 0o755, b); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
