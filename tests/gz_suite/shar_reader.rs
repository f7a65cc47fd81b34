//! The shar reader (`agentsadm_gz::shar`) on archives written by the image
//! builder's shar writer: members round-trip, refusals name their line,
//! and loose members land under the image's top directory.

use agentsadm_gz::shar::Member;

use agentsadm_gz::shar::members;

use agentsadm_gz::shar::to_tar;
use agentsadm_sim::imagebuild::shar::write;

/// Every length of binary member survives uuencoding and decoding (a
/// member that is not text is uuencoded by the writer).
#[test]
fn uuencode_round_trips_every_length() {
    for n in 0..200usize {
        let data: Vec<u8> = (0..n).map(|i| (i * 37 % 256) as u8).collect();
        // A NUL keeps even the short ones out of the text path.
        let mut member = vec![0u8];
        member.extend_from_slice(&data);
        let shar = write(&[("x/y", 0o644, &member)]);
        let got = members(shar.as_bytes()).expect("decodes");
        let file = got
            .iter()
            .find_map(|m| match m {
                Member::File { path, data, .. } if path == "x/y" => Some(data.clone()),
                _ => None,
            })
            .expect("complete");
        assert_eq!(file, member, "length {n}");
    }
}

#[test]
fn written_shars_read_back() {
    let bin: Vec<u8> = (0..=255u8).collect();
    let shar = write(&[
        ("pkg/a.sh", 0o755, b"#!/bin/sh\nXecho\nSHAR_EOF\n"),
        ("pkg/bin/tool", 0o755, &bin),
        ("pkg/no newline 'q'", 0o644, b"abc"),
    ]);
    let got = members(shar.as_bytes()).expect("reads");
    assert_eq!(
        got,
        vec![
            Member::Dir { path: "pkg".into() },
            Member::Dir {
                path: "pkg/bin".into()
            },
            Member::File {
                path: "pkg/a.sh".into(),
                mode: 0o755,
                data: b"#!/bin/sh\nXecho\nSHAR_EOF\n".to_vec()
            },
            Member::File {
                path: "pkg/bin/tool".into(),
                mode: 0o755,
                data: bin
            },
            Member::File {
                path: "pkg/no newline 'q'".into(),
                mode: 0o644,
                data: b"abc".to_vec()
            },
        ]
    );
}

#[test]
fn refusals_name_the_line() {
    let base = write(&[("pkg/f", 0o644, b"hello\n")]);
    let wrong_size = base.replace("-ne 6", "-ne 7");
    let e = members(wrong_size.as_bytes()).unwrap_err();
    assert!(e.reason.contains("decodes to 6 bytes"), "{e}");
    assert!(e.line > 1);

    let unterminated = base.replace("SHAR_EOF\n  chmod", "  chmod");
    let e = members(unterminated.as_bytes()).unwrap_err();
    assert!(e.reason.contains("never ends"), "{e}");

    let gz =
        "#!/bin/sh\n  sed 's/^X//' << 'SHAR_EOF' | uudecode && gzip -dc x.gz > 'f'\nX\nSHAR_EOF\n";
    let e = members(gz.as_bytes()).unwrap_err();
    assert!(e.reason.contains("not supported"), "{e}");

    let twice = write(&[("pkg/f", 0o644, b"a\n"), ("pkg/f", 0o644, b"b\n")]);
    let e = members(twice.as_bytes()).unwrap_err();
    assert!(e.reason.contains("twice"), "{e}");

    let e = members(b"#!/bin/sh\necho nothing here\n").unwrap_err();
    assert!(e.reason.contains("no files"), "{e}");

    let bad_uu = "#!/bin/sh\nsed 's/^X//' << 'SHAR_EOF' | uudecode &&\nbegin 600 f\nM~~~~\n`\nend\nSHAR_EOF\n";
    let e = members(bad_uu.as_bytes()).unwrap_err();
    assert_eq!(e.line, 4, "{e}");
}

/// Older sharutils (4.2, still on some build hosts) prefix every line
/// of a member with `X`, uuencoded ones included.
#[test]
fn every_line_prefixed_with_x_reads_the_same() {
    let uu: String = agentsadm_sim::imagebuild::shar::uuencode("pkg/b", b"\x00\x01\x02binary")
        .lines()
        .map(|l| format!("X{l}\n"))
        .collect();
    let shar = format!(
        "#!/bin/sh\nif test ! -d 'pkg'; then\n  mkdir 'pkg'\nfi\nsed 's/^X//' << 'SHAR_EOF' > 'pkg/a' &&\nX#!/bin/sh\nXXecho\nSHAR_EOF\nchmod 0755 'pkg/a'\nsed 's/^X//' << 'SHAR_EOF' | uudecode &&\n{uu}SHAR_EOF\n"
    );
    let got = members(shar.as_bytes()).expect("reads");
    assert_eq!(
        got,
        vec![
            Member::Dir { path: "pkg".into() },
            Member::File {
                path: "pkg/a".into(),
                mode: 0o755,
                data: b"#!/bin/sh\nXecho\n".to_vec()
            },
            Member::File {
                path: "pkg/b".into(),
                mode: 0o644,
                data: b"\x00\x01\x02binary".to_vec()
            },
        ]
    );
}

#[test]
fn other_heredocs_are_skipped() {
    let shar = format!(
        "#!/bin/bash\nmkdir -p /var/tmp/x\nmkdir /abs\ncat > /tmp/md5sum << 'EOFTOOL'\nsed 's/^X//' << 'SHAR_EOF' > 'evil' &&\nEOFTOOL\nchmod +x /tmp/md5sum\nchmod 755 /tmp/md5sum\n{}(\n  md5sum -c\n) << \\SHAR_EOF\nabc  pkg/f\nSHAR_EOF\n",
        write(&[("pkg/f", 0o644, b"ok\n")])
    );
    let got = members(shar.as_bytes()).expect("reads");
    assert_eq!(got.len(), 2, "{got:?}");
}

#[test]
fn to_tar_places_loose_members_under_the_top() {
    let shar = write(&[
        ("contents.tgz", 0o644, b"\x1f\x8b"),
        ("install.sh", 0o755, b"x\n"),
    ]);
    let tar_bytes = to_tar(shar.as_bytes(), Some("sdcadm")).expect("tar");
    let mut a = tar::Archive::new(&tar_bytes[..]);
    let names: Vec<String> = a
        .entries()
        .unwrap()
        .map(|e| e.unwrap().path().unwrap().display().to_string())
        .collect();
    assert_eq!(
        names,
        vec!["sdcadm/", "sdcadm/contents.tgz", "sdcadm/install.sh"]
    );

    let packaged = write(&[("sdcadm/x", 0o644, b"x\n")]);
    let tar_bytes = to_tar(packaged.as_bytes(), Some("sdcadm")).expect("tar");
    let mut a = tar::Archive::new(&tar_bytes[..]);
    assert_eq!(
        a.entries().unwrap().count(),
        2,
        "sdcadm/ and sdcadm/x, not sdcadm/sdcadm/x"
    );
}
