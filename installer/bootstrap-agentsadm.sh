#!/bin/bash
#
# bootstrap-agentsadm.sh: put agentsadm on a server that has none (it was
# set up before agentsadm existed), or whose copy is too old to parse what
# the orchestrator sends it. It needs no agentsadm: the orchestrator sends
# this script itself through CNAPI execute (agentsadm_api::bootstrap), with
# the image's UUID, SHA-1 and size from the datacenter IMGAPI's manifest,
# then has the copy it put in place record itself (`agentsadm gz install
# IMAGE --json`: the image is already there, so the installer keeps the
# instance UUID, adopts it into SAPI and reports to CNAPI).
#
# 1. Check the cache's filesystem has room, download the image file from
#    the datacenter IMGAPI into the installer's download cache, as a
#    partial file never over the manifest's size plus one byte, check its
#    size and SHA-1, and rename it to <uuid>.file (the cache only ever
#    holds verified files; `gz install` verifies it again when it uses it).
# 2. Unpack agentsadm's four files beside the install directory
#    (opt/smartdc/agentsadm.bootstrap, the same filesystem) and check them:
#    regular files, image_uuid naming IMAGE, package.json naming
#    agentsadm, a binary that runs.
# 3. Rename them into opt/smartdc/agentsadm (and the opt/smartdc/bin link)
#    one by one, image_uuid last: a copy whose image_uuid names IMAGE is
#    complete. The install record of a copy being replaced this way is
#    removed first (it would describe files that are no longer there).
# 4. Remove the unpacked files.
#
# Each step is skipped when done and leaves a working agentsadm (the old
# one or the new one; the binary is only ever renamed over), so a run
# killed anywhere is finished by running it again.
#
# Arguments: IMAGE_UUID SHA1 SIZE
# Environment (CNAPI execute passes exactly the request's env):
#   IMGAPI_URL      the datacenter IMGAPI (default: http://<imgapi_domain>
#                   from the SDC config, /lib/sdc/config.sh)
#   AGENTSADM_ROOT  the global zone root (default /; a directory in tests
#                   and the simulator)
#
# Checkpoints (bootstrap-fetched, bootstrap-unpacked, bootstrap-unrecorded,
# bootstrap-binary, bootstrap-placed) call `checkpoint NAME`, which does
# nothing here: a test harness that runs this script defines the function
# first (the simulator kills the script at one), so the copy every server
# gets carries no test switch.
# Exit status: 0 done; 1 failed (why on stderr); 2 bad arguments. Never
# 113, which Ur answers as 0 and then reboots the server.
#

set -o errexit
set -o pipefail
set -o nounset

usage() {
    echo "usage: bootstrap-agentsadm.sh IMAGE_UUID SHA1 SIZE" >&2
    exit 2
}

[[ $# -eq 3 ]] || usage
IMAGE=$1
SHA1=$2
SIZE=$3
[[ $IMAGE =~ ^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$ ]] || usage
[[ $SHA1 =~ ^[0-9a-f]{40}$ ]] || usage
[[ $SIZE =~ ^[0-9]{1,12}$ ]] || usage

ROOT=${AGENTSADM_ROOT:-/}
[[ $ROOT == /* ]] || usage
# Paths below are "$P/opt/...": P is empty for /.
P=${ROOT%/}
DIR=$P/opt/smartdc/agentsadm
BIN=$DIR/bin/agentsadm
LINK=$P/opt/smartdc/bin/agentsadm
LINK_TARGET=../agentsadm/bin/agentsadm
STATE=$P/opt/smartdc/agents/.agentsadm
CACHE=$STATE/downloads
FILE=$CACHE/$IMAGE.file
RECORD=$STATE/installed/agentsadm.json
STAGE=$P/opt/smartdc/agentsadm.bootstrap
# The files of agentsadm's image (agentsadm_gz::release), image_uuid last.
FILES=(package.json etc/buildstamp bin/agentsadm image_uuid)

log() {
    printf '%s bootstrap-agentsadm: %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$*"
}

fatal() {
    log "error: $*" >&2
    exit 1
}

declare -F checkpoint >/dev/null || checkpoint() { :; }

imgapi_url() {
    if [[ -n ${IMGAPI_URL:-} ]]; then
        echo "${IMGAPI_URL%/}"
        return
    fi
    local domain
    domain=$(
        set +o errexit +o nounset
        # shellcheck source=/dev/null
        . /lib/sdc/config.sh 2>/dev/null && load_sdc_config 2>/dev/null
        echo "${CONFIG_imgapi_domain:-}"
    ) || true
    [[ -n $domain ]] ||
        fatal "no IMGAPI_URL given and no imgapi_domain in the SDC config (/lib/sdc/config.sh); pass IMGAPI_URL"
    echo "http://$domain"
}

sha1_of() {
    if command -v digest >/dev/null 2>&1; then
        digest -a sha1 "$1"
    elif command -v sha1sum >/dev/null 2>&1; then
        sha1sum "$1" | cut -d' ' -f1
    else
        openssl dgst -sha1 -r "$1" | cut -d' ' -f1
    fi
}

size_of() {
    wc -c <"$1" | tr -d ' '
}

# Why $1 is not the image file the manifest describes (nothing when it is).
mismatch() {
    local size sum
    size=$(size_of "$1")
    if [[ $size != "$SIZE" ]]; then
        echo "size $size, the manifest says $SIZE"
        return
    fi
    sum=$(sha1_of "$1")
    if [[ $sum != "$SHA1" ]]; then
        echo "SHA-1 $sum, the manifest says $SHA1"
    fi
}

# Refuse to start when the filesystem of $1 has not room for the download
# and its unpacked files (at most 4 times the compressed size, plus 8 MiB):
# a full zones pool stops every zone on the server.
room() {
    local need avail
    need=$(((SIZE * 4 + (8 << 20)) / 1024))
    avail=$(df -Pk "$1" 2>/dev/null | awk 'NR == 2 { print $4 }')
    [[ $avail =~ ^[0-9]+$ ]] ||
        fatal "cannot tell the free space of $1 (df -Pk); nothing was downloaded"
    ((avail >= need)) ||
        fatal "$1 has $avail KiB free, the download and unpack of agentsadm image $IMAGE ($SIZE bytes) need $need KiB; free space there and run again"
}

# The copy in place is the image's, whole.
placed() {
    [[ -f $DIR/image_uuid && ! -L $DIR/image_uuid ]] &&
        [[ $(<"$DIR/image_uuid") == "$IMAGE" ]] &&
        [[ -f $BIN && -x $BIN ]]
}

fetch() {
    if [[ -f $FILE && -z $(mismatch "$FILE") ]]; then
        log "image $IMAGE already downloaded and verified ($FILE)"
        return
    fi
    local url partial why
    url=$(imgapi_url)/images/$IMAGE/file
    mkdir -p "$CACHE"
    rm -f "$CACHE/$IMAGE".bootstrap-*.partial
    partial=$CACHE/$IMAGE.bootstrap-$$.partial
    room "$CACHE"
    log "downloading $url"
    # At most SIZE + 1 bytes are ever written, whatever the server sends:
    # curl before 8.4 does not enforce --max-filesize on a response
    # without Content-Length, so head(1) cuts the stream (one byte over
    # the manifest's size is enough to tell the file is not the image; a
    # retry that appended to what was written fails the SHA-1 check).
    if ! curl -fsS --connect-timeout 10 --retry 3 --retry-delay 2 --max-time 900 \
        --max-filesize "$SIZE" "$url" | head -c "$((SIZE + 1))" >"$partial"; then
        if [[ $(size_of "$partial") -gt $SIZE ]]; then
            rm -f "$partial"
            fatal "$url sent more than the $SIZE bytes image $IMAGE's manifest gives its file; stopped at $((SIZE + 1)); nothing was changed"
        fi
        rm -f "$partial"
        fatal "cannot download agentsadm image $IMAGE from $url; check that the datacenter IMGAPI has it ('sdc-imgadm get $IMAGE')"
    fi
    why=$(mismatch "$partial")
    if [[ -n $why ]]; then
        rm -f "$partial"
        fatal "the file downloaded from $url is not image $IMAGE: $why; nothing was changed"
    fi
    mv -f "$partial" "$FILE"
    checkpoint bootstrap-fetched
}

unpack() {
    local top=$STAGE/agentsadm f name
    rm -rf "$STAGE"
    mkdir -p "$STAGE"
    log "unpacking agentsadm beside $DIR"
    # Only the image's own files, by name: nothing else in the archive is
    # written anywhere.
    (cd "$STAGE" && tar -xzf "$FILE" "${FILES[@]/#/agentsadm/}") ||
        fatal "image $IMAGE is not an agentsadm image: its file lacks agentsadm/{${FILES[*]}}"
    for f in "${FILES[@]}"; do
        [[ -f $top/$f && ! -L $top/$f ]] ||
            fatal "image $IMAGE is not an agentsadm image: agentsadm/$f is not a regular file"
    done
    [[ $(<"$top/image_uuid") == "$IMAGE" ]] ||
        fatal "image $IMAGE is not what it says: its agentsadm/image_uuid names another image"
    name=$(grep -c '"name": *"agentsadm"' "$top/package.json" || true)
    [[ $name == 1 ]] ||
        fatal "image $IMAGE is not an agentsadm image: its package.json does not name agentsadm"
    chmod 0755 "$top/bin/agentsadm"
    "$top/bin/agentsadm" --version >/dev/null 2>&1 ||
        fatal "the agentsadm of image $IMAGE does not run on this server ($top/bin/agentsadm --version failed)"
    checkpoint bootstrap-unpacked
}

place() {
    local top=$STAGE/agentsadm f
    mkdir -p "$DIR/bin" "$DIR/etc" "$(dirname "$LINK")"
    if [[ -f $RECORD ]]; then
        # The record of the copy being replaced: it lists that copy's
        # files, and the copy put here records itself afterwards.
        rm -f "$RECORD"
        checkpoint bootstrap-unrecorded
    fi
    log "renaming agentsadm into $DIR"
    for f in "${FILES[@]}"; do
        if [[ $f == image_uuid ]]; then
            # Made beside and renamed over: never missing.
            rm -f "$LINK.bootstrap-$$"
            ln -s "$LINK_TARGET" "$LINK.bootstrap-$$"
            mv -f "$LINK.bootstrap-$$" "$LINK"
            checkpoint bootstrap-binary
        fi
        mv -f "$top/$f" "$DIR/$f"
    done
    checkpoint bootstrap-placed
}

if placed; then
    log "agentsadm image $IMAGE is already in place"
else
    fetch
    unpack
    place
fi
rm -rf "$STAGE"
log "agentsadm image $IMAGE is in place at $BIN"
