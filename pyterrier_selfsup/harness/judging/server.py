"""The judging page: a Flask application over one campaign, served on 127.0.0.1.

Each grade is posted as it is made and saved by :meth:`Campaign.grade` (synced to disk) before
the page shows it as saved. The server refuses a post without the token made at its start
(the page carries it), a post over :data:`LARGEST_POST` bytes, a request whose ``Host`` is not
the address it serves (another site's page cannot reach it through a name it controls), and a
file outside the campaign's standard files.
"""
import hmac
import re
import secrets
import threading
from collections.abc import Callable, Mapping

import pyterrier as pt
from markupsafe import Markup, escape

from pyterrier_selfsup.harness.judging import DEPTH
from pyterrier_selfsup.harness.judging.campaign import (
    GRADES,
    QRELS_FILE,
    TOPICS_FILE,
    Campaign,
    CampaignError,
)
from pyterrier_selfsup.harness.judging.reporting import report

LARGEST_POST = 16 * 1024
TOKEN_HEADER = 'X-Judging-Token'
# words that say nothing of a passage's topic, left unmarked
_COMMON = frozenset('a an and are as at be by can do does for from has have how in into is it '
                    'its of on or that the their there these this to was were what when where '
                    'which who why will with'.split())
_WORD = re.compile(r'\w+', re.UNICODE)


def highlighted(text: str, query: str) -> Markup:
    """``text``, escaped, with each word it shares with ``query`` (bar common ones) marked."""
    words = {w.casefold() for w in _WORD.findall(query) if w.casefold() not in _COMMON}
    if not words:
        return escape(text)
    pieces, at = [], 0
    for match in _WORD.finditer(text):
        if match.group().casefold() in words:
            pieces += [escape(text[at:match.start()]),
                       Markup('<mark>%s</mark>') % match.group()]
            at = match.end()
    return Markup('').join(pieces + [escape(text[at:])])


def make_app(campaign: Campaign, *, token: str | None = None,
             pipelines: Callable[[], Mapping[str, pt.Transformer]] | None = None,
             collection=None, hosts=('127.0.0.1', 'localhost', '::1')):
    """The Flask application that serves ``campaign``'s page.

    Args:
        campaign: the campaign judged.
        token: the token posts must carry (None: a new random one).
        pipelines: makes the campaign's pipelines (names to transformers), called once, on the
            first query the user types in; None: typed queries are refused.
        collection: the campaign's collection (needed with ``pipelines``).
        hosts: the names the page may be reached by (the ``Host`` header).

        app = make_app(Campaign('judged'))
        app.run(port=8765)"""
    from flask import Flask, abort, jsonify, redirect, render_template, request, send_from_directory
    app = Flask(__name__)
    app.config['MAX_CONTENT_LENGTH'] = LARGEST_POST
    app.config['JUDGING_TOKEN'] = token = token or secrets.token_urlsafe(24)
    lock = threading.Lock()  # (the campaign read or written by one request at a time)
    building = threading.Lock()  # (the pipelines built once, while grading goes on)
    built: dict[str, Mapping[str, pt.Transformer]] = {}

    @app.before_request
    def local_only():
        host = (request.host or '').rsplit(':', 1)[0].strip('[]')
        if host not in hosts:
            abort(403)  # (DNS rebinding: a page of another site under a name it points here)
        if request.method == 'POST' and not hmac.compare_digest(
                request.headers.get(TOKEN_HEADER, ''), token):
            return jsonify(error='the server was started again since this page was loaded: '
                                 'reload the page (nothing saved is lost)'), 403

    def position(qid: str) -> int:
        return list(campaign.queries['qid']).index(qid)

    def first_open() -> int | None:
        done = set(campaign.complete())
        for i, qid in enumerate(campaign.queries['qid']):
            if qid not in done:
                return i
        return None

    @app.get('/')
    def start():
        at = first_open()
        if at is None and len(campaign.queries):
            return redirect('/report')
        return redirect(f'/query/{at or 0}')

    @app.get('/query/<int:n>')
    def query_page(n: int):
        with lock:
            return _query_page(n)

    def _query_page(n: int):
        queries = campaign.queries
        if len(queries) and not 0 <= n < len(queries):
            abort(404)
        row = queries.iloc[n] if len(queries) else None
        passages = [] if row is None else [
            {'docno': p.docno, 'text': highlighted(p.text, row['query']),
             'grade': campaign.grade_of(row['qid'], p.docno)}
            for p in campaign.passages(row['qid'])]
        return render_template('page.html', token=token, n=n, row=row, passages=passages,
                               total=len(queries), progress=campaign.progress(),
                               grades=GRADES, can_type=pipelines is not None,
                               next_open=first_open(), header=TOKEN_HEADER)

    @app.post('/grade')
    def grade():
        body = request.get_json(silent=True)
        if not isinstance(body, dict):
            return jsonify(error='a grade is a JSON object: qid, docno, grade'), 400
        try:
            with lock:
                campaign.grade(str(body.get('qid')), str(body.get('docno')),
                               int(body.get('grade')))
        except (CampaignError, TypeError, ValueError) as e:
            return jsonify(error=str(e)), 400
        return jsonify(saved=True, judged=campaign.judged(str(body['qid'])),
                       **campaign.progress())

    @app.post('/queries')
    def add_query():
        if pipelines is None:
            return jsonify(error='this server pools no new queries: start it with '
                           '`selfsup judge` and its pipelines'), 400
        body = request.get_json(silent=True)
        text = ' '.join(str(body.get('query', '') if isinstance(body, dict) else '').split())
        if not text:
            return jsonify(error='an empty query'), 400
        with building:
            if 'systems' not in built:
                built['systems'] = pipelines()
        with lock:
            known = dict(zip(campaign.queries['query'], campaign.queries['qid']))
            if text not in known:
                added = campaign.add_queries(
                    pt.new.queries([text], qid=[f'typed-{len(campaign.queries) + 1}']),
                    collection, built['systems'])
                if not added:
                    return jsonify(error='no pipeline found anything for this query'), 400
                known[text] = added[0]
        return jsonify(url=f'/query/{position(known[text])}')

    @app.get('/report')
    def report_page():
        with lock:
            made, progress = report(campaign), campaign.progress()
        return render_template('report.html', report=made, progress=progress, qrels=QRELS_FILE,
                               topics=TOPICS_FILE)

    @app.get('/files/<path:name>')
    def files(name: str):
        if name not in (QRELS_FILE, TOPICS_FILE):
            abort(404)
        with lock:
            campaign.write_qrels()
        return send_from_directory(campaign.directory, name, mimetype='text/plain')

    return app


def serve(campaign: Campaign, *, host: str = '127.0.0.1', port: int = 8765,
          pipelines: Callable[[], Mapping[str, pt.Transformer]] | None = None,
          collection=None, say=lambda line: print(line, flush=True)) -> None:
    """Serves ``campaign``'s page until interrupted (Ctrl-C); every grade is saved as it is
    made, so stopping loses nothing. ``port`` 0 takes a free one. The address is said with
    ``say`` once the server listens.

        serve(Campaign('judged'), port=8765)"""
    import fcntl

    from werkzeug.serving import make_server
    held = open(campaign.directory / '.server.lock', 'w')
    try:  # (two servers on one campaign would each rewrite its files from their own memory)
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        held.close()
        raise CampaignError(f'another server is serving {campaign.directory}: stop it, or use '
                            'its page') from None
    local = ('127.0.0.1', 'localhost', '::1')
    app = make_app(campaign, pipelines=pipelines, collection=collection,
                   hosts=local if host in local + ('0.0.0.0', '::') else local + (host,))
    try:  # (werkzeug says why on stderr and exits where the address is taken)
        server = make_server(host, port, app, threaded=True)
    except (OSError, SystemExit):
        held.close()
        raise CampaignError(f'cannot serve on {host}:{port}, which is taken or not this '
                            "machine's: choose another port with --port (0: a free one)") from None
    progress = campaign.progress()
    say(f'judging page: http://{host}:{server.server_port}/ (campaign {campaign.directory}: '
        f'{progress["graded"]} of {progress["pooled"]} passages graded; every grade is saved '
        'as it is made, and Ctrl-C stops the server)')
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        held.close()


def judge(directory, collection, pipelines: Mapping[str, pt.Transformer], queries=None, *,
          depth: int = DEPTH, port: int = 8765, seed: int = 0) -> Campaign:
    """Starts a campaign in ``directory`` (or reopens the one there, adding the ``queries`` it
    lacks) and serves its page until interrupted (Ctrl-C); returns the campaign.

    Args:
        directory: the campaign's directory.
        collection: the :class:`~pyterrier_selfsup.Collection` the passages come from.
        pipelines: two or more named pipelines, the first the baseline.
        queries: the queries to judge (``qid``, ``query``); more can be typed into the page.
        depth: how many of each pipeline's results are pooled.
        port: the port on 127.0.0.1 (0: a free one).
        seed: the shuffle's seed.

        campaign = judge('judged', Collection('classic/adi'), {'bm25': bm25, 'minilm': dense})"""
    campaign = (Campaign.reopened(directory, collection)
                or Campaign.create(directory, collection, pipelines, depth=depth, seed=seed))
    if queries is not None:
        campaign.add_queries(queries, collection, pipelines)
    serve(campaign, port=port, pipelines=lambda: pipelines, collection=collection)
    return campaign
