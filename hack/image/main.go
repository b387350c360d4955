package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"time"

	"github.com/elastictraining/coordinator/internal/ociimage"
)

func main() {
	binary := flag.String("binary", "", "the static linux binary")
	tag := flag.String("tag", "", "the image's name and tag, e.g. elastic-coordinator:v0.8.0")
	version := flag.String("version", "dev", "the version label")
	arch := flag.String("arch", runtime.GOARCH, "the binary's architecture (GOARCH)")
	out := flag.String("out", "", "write the image here as a tarball")
	push := flag.String("push", "", "push the image to this reference, e.g. registry.example.com/elastic-coordinator:v0.8.0")
	flag.Parse()
	if *binary == "" || *tag == "" || (*out == "" && *push == "") {
		fmt.Fprintln(os.Stderr, "image: -binary, -tag and -out or -push are required")
		os.Exit(2)
	}
	// SOURCE_DATE_EPOCH, when set, dates the image (reproducible builds);
	// else the Unix epoch, so that one binary always makes one image.
	created := time.Unix(0, 0).UTC()
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		secs, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			fmt.Fprintf(os.Stderr, "image: SOURCE_DATE_EPOCH %q: not a number of seconds\n", s)
			os.Exit(2)
		}
		created = time.Unix(secs, 0).UTC()
	}
	img, err := ociimage.Build(*binary, *arch, *version, created)
	if err == nil && *out != "" {
		err = ociimage.WriteTarball(img, *tag, *out)
	}
	if err == nil && *push != "" {
		err = ociimage.Push(img, *push)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "image: %v\n", err)
		os.Exit(1)
	}
	digest, _ := img.Digest()
	if *out != "" {
		fmt.Printf("%s (%s) written to %s\n", *tag, digest, *out)
	}
	if *push != "" {
		fmt.Printf("pushed %s (%s)\n", *push, digest)
	}
}
