//! A TCP trade feed read through the replayable-source contract
//! ([`lockgate::source::SplitSource`]): the feed's server replays from any
//! sequence number (`FROM <seq>`), so the source's position is the next
//! sequence number; at every restart and restore [`lockgate::source::Replayable`]
//! closes the connection of the attempt before (dropping the reader) and
//! reconnects from the checkpointed position, so nothing an earlier
//! connection read can leak in.

use crate::trades::{trade, Trade};
use lockgate::source::{SplitOutput, SplitReader, SplitSource};
use lockgate::{BoxError, SourcePoll};
use std::io::{BufRead, BufReader, ErrorKind, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

/// Serves the feed of trades `0..n` ([`trade`]) on `listener`, one thread
/// per connection: a client sends `FROM <seq>\n` and gets the trades from
/// `seq` on, a line each (`seq symbol price qty ts_ms`), then the
/// connection closes. Runs until the process ends.
pub fn serve(listener: TcpListener, n: u64) {
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut reader = BufReader::new(match stream.try_clone() {
                    Ok(s) => s,
                    Err(_) => return,
                });
                let mut line = String::new();
                if reader.read_line(&mut line).is_err() {
                    return;
                }
                let from = line
                    .trim()
                    .strip_prefix("FROM ")
                    .and_then(|s| s.parse::<u64>().ok())
                    .unwrap_or(0);
                let mut out = std::io::BufWriter::new(stream);
                for t in (from..n).map(trade) {
                    let line =
                        format!("{} {} {} {} {}\n", t.seq, t.symbol, t.price, t.qty, t.ts_ms);
                    if out.write_all(line.as_bytes()).is_err() {
                        return; // the client closed: a restart
                    }
                }
                let _ = out.flush();
            });
        }
    });
}

/// The feed at `addr` as a split source: one split (the feed), its
/// position the next sequence number.
#[derive(Debug)]
pub struct TcpFeed {
    /// The feed's server.
    pub addr: SocketAddr,
}

/// An open connection to the feed.
#[derive(Debug)]
pub struct TcpFeedReader {
    stream: BufReader<TcpStream>,
    line: String,
}

impl SplitSource for TcpFeed {
    type Record = Trade;
    type Split = u32;
    type Position = u64;
    type Reader = TcpFeedReader;

    fn splits(&self) -> Vec<u32> {
        vec![0]
    }

    fn open(&mut self, splits: &[(u32, Option<u64>)]) -> Result<TcpFeedReader, BoxError> {
        let from = splits.first().and_then(|(_, p)| *p).unwrap_or(0);
        let mut stream = TcpStream::connect(self.addr)?;
        stream.write_all(format!("FROM {from}\n").as_bytes())?;
        // Reads wait at most 1 ms: the task must not block.
        stream.set_read_timeout(Some(Duration::from_millis(1)))?;
        Ok(TcpFeedReader {
            stream: BufReader::new(stream),
            line: String::new(),
        })
    }
}

fn parse(line: &str) -> Result<Trade, BoxError> {
    let f: Vec<&str> = line.split_whitespace().collect();
    let field = |i: usize| f.get(i).copied().ok_or(format!("a short line: {line:?}"));
    Ok(Trade {
        seq: field(0)?.parse()?,
        symbol: field(1)?.parse()?,
        price: field(2)?.parse()?,
        qty: field(3)?.parse()?,
        ts_ms: field(4)?.parse()?,
    })
}

impl SplitReader<TcpFeed> for TcpFeedReader {
    fn read(&mut self, out: &mut SplitOutput<'_, TcpFeed>) -> Result<SourcePoll, BoxError> {
        while !out.is_full() {
            // A line cut by the timeout stays in `self.line` until its end
            // arrives.
            match self.stream.read_line(&mut self.line) {
                Ok(0) => return Ok(SourcePoll::Finished), // the feed's end
                Ok(_) if self.line.ends_with('\n') => {
                    let t = parse(&self.line)?;
                    self.line.clear();
                    let next = t.seq + 1;
                    out.emit(t, &0, next);
                }
                Ok(_) => {}
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    return Ok(if out.is_empty() {
                        SourcePoll::Idle {
                            wake_at_ns: Some(lockgate::tuning::now_ns() + 1_000_000),
                        }
                    } else {
                        SourcePoll::Ready
                    });
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(SourcePoll::Ready)
    }
}
