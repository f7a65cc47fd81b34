#
# Makefile for agentsadm, with the targets every Triton repository has:
#
#   make               the server's binary (release, no simulator):
#                      target/release/agentsadm
#   make check         fmt, clippy (both builds), the illumos check (not on
#                      SmartOS, where the build itself is the check), tests
#   make release       the image: build/agentsadm-$(VERSION)-$(STAMP).tar.gz
#                      and its IMGAPI manifest .manifest beside it
#   make publish       release, then copy both into $(BITS_DIR)/agentsadm/
#   make check-illumos the illumos type-check alone (.ci/illumos-check)
#   make clean
#
# On SmartOS this runs in a build zone (README "Building for SmartOS") and
# builds the real illumos binary; elsewhere it builds and packages the
# host's binary, which is how the packaging is tested. GNU make: run it as
# `gmake` on SmartOS.
#
# The version stamp follows eng's Makefile.defs: STAMP is
# <branch>-<timestamp>-g<sha>, the image's version <semver>-$(STAMP) with the
# semver from Cargo.toml; TIMESTAMP (UTC, YYYYMMDDTHHMMSSZ) may be given,
# as Triton's builds do, so several artifacts share one stamp.
#

NAME            := agentsadm
CARGO           ?= cargo
BUILD           := build
UNAME_S         := $(shell uname -s)

VERSION         := $(shell sed -n 's/^version = "\([^"]*\)"/\1/p' Cargo.toml | head -1)
BRANCH          ?= $(shell git symbolic-ref HEAD 2>/dev/null | awk -F/ '{print $$3}')
ifeq ($(BRANCH),)
BRANCH          := detached
endif
ifeq ($(TIMESTAMP),)
TIMESTAMP       := $(shell date -u "+%Y%m%dT%H%M%SZ")
endif
GITSHA          := $(shell git rev-parse --short=7 HEAD)
STAMP           := $(BRANCH)-$(TIMESTAMP)-g$(GITSHA)
IMAGE_VERSION   := $(VERSION)-$(STAMP)

BIN             := target/release/$(NAME)
RELEASE_TARBALL := $(BUILD)/$(NAME)-$(IMAGE_VERSION).tar.gz
RELEASE_MANIFEST:= $(BUILD)/$(NAME)-$(IMAGE_VERSION).manifest

# The shipped binary: no simulator, no symbols, and it says the version of
# the image it goes into (`agentsadm --version`).
SERVER_BUILD    := $(CARGO) build --release --locked -p $(NAME) --no-default-features

.PHONY: all
all:
	$(SERVER_BUILD)

.PHONY: check
check:
	$(CARGO) fmt --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	$(CARGO) clippy -p $(NAME) --no-default-features -- -D warnings
ifneq ($(UNAME_S),SunOS)
	.ci/illumos-check
endif
	$(CARGO) test --workspace

.PHONY: check-illumos
check-illumos:
	.ci/illumos-check

.PHONY: release
release:
	@if [ -z "$(VERSION)" ] || [ -z "$(GITSHA)" ]; then \
		echo "error: cannot tell the version (Cargo.toml) or the commit (git)" >&2; \
		exit 1; \
	fi
	AGENTSADM_VERSION_STAMP=$(IMAGE_VERSION) CARGO_PROFILE_RELEASE_STRIP=symbols \
		$(SERVER_BUILD)
ifeq ($(UNAME_S),SunOS)
	@# The global zone has no pkgsrc: the binary may need only the
	@# platform's libraries.
	@if ldd $(BIN) | grep -q /opt/; then \
		echo "error: $(BIN) needs libraries from /opt (ldd below); link it against the platform's only" >&2; \
		ldd $(BIN) >&2; \
		exit 1; \
	fi
endif
	mkdir -p $(BUILD)
	$(BIN) installer release --binary $(BIN) --semver $(VERSION) \
		--branch $(BRANCH) --timestamp $(TIMESTAMP) --git-sha $(GITSHA) \
		--out $(BUILD)

.PHONY: publish
publish: check-bits-dir release
	mkdir -p $(BITS_DIR)/$(NAME)
	cp $(RELEASE_TARBALL) $(RELEASE_MANIFEST) $(BITS_DIR)/$(NAME)/

# Before the build, not after it.
.PHONY: check-bits-dir
check-bits-dir:
	@if [ -z "$(BITS_DIR)" ]; then \
		echo "error: 'BITS_DIR' must be set for 'publish' target" >&2; \
		exit 1; \
	fi

.PHONY: clean
clean:
	rm -rf $(BUILD)
	$(CARGO) clean
