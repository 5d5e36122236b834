// The judging page: each grade is posted as it is made and marked "saved" once the server has
// written it to disk; the keyboard grades the passage in focus and moves to the next ungraded.
(function () {
  'use strict';
  const meta = document.querySelector('meta[name="judging-token"]');
  const token = meta.content, header = meta.dataset.header;
  const query = document.getElementById('query');
  const items = Array.from(document.querySelectorAll('#passages .passage'));
  let at = Math.max(0, items.findIndex((li) => li.dataset.grade === ''));

  // one post at a time, in the order the grades were given: the last grade given is the last saved
  let queue = Promise.resolve();
  function post(url, body) {
    const sent = queue.then(() => fetch(url, {
      method: 'POST', headers: {'Content-Type': 'application/json', [header]: token},
      body: JSON.stringify(body)}))
      .then((r) => r.json().catch(() => ({error: 'the server answered ' + r.status}))
        .then((json) => (r.ok ? json : Promise.reject(json.error))));
    queue = sent.catch(() => undefined);
    return sent;
  }

  function focus(i) {
    if (!items.length) return;
    at = Math.min(Math.max(i, 0), items.length - 1);
    items.forEach((li, j) => li.classList.toggle('current', j === at));
    items[at].focus({preventScroll: true});
    items[at].scrollIntoView({block: 'nearest'});
  }

  function showProgress(p) {
    document.getElementById('graded').textContent = p.graded;
    document.getElementById('complete').textContent = p.complete;
    const bar = document.getElementById('bar');
    bar.max = p.pooled || 1;
    bar.value = p.graded;
  }

  function grade(li, value) {
    const state = li.querySelector('.state');
    state.textContent = 'saving';
    li.classList.add('saving');
    return post('/grade', {qid: query.dataset.qid, docno: li.dataset.docno, grade: value})
      .then((p) => {
        li.dataset.grade = String(value);
        li.classList.remove('saving');
        li.classList.add('graded');
        li.querySelectorAll('button.grade').forEach((b) =>
          b.classList.toggle('chosen', b.dataset.grade === String(value)));
        state.textContent = 'saved';
        showProgress(p);
        const open = items.findIndex((other) => other.dataset.grade === '');
        if (open >= 0) focus(open);
        else document.body.classList.add('query-done');
        if (p.complete === p.queries) document.getElementById('done').hidden = false;
      })
      .catch((error) => { state.textContent = 'not saved: ' + error; });
  }

  function goOn() {
    const next = Number(query.dataset.n) + 1;
    window.location.href = next < Number(query.dataset.total) ? '/query/' + next : '/report';
  }

  items.forEach((li, i) => {
    li.addEventListener('click', () => focus(i));
    li.querySelectorAll('button.grade').forEach((button) => button.addEventListener(
      'click', (event) => { event.stopPropagation(); focus(i);
                            grade(li, Number(button.dataset.grade)); }));
  });

  document.addEventListener('keydown', (event) => {
    if (event.target.tagName === 'INPUT' || event.ctrlKey || event.metaKey || event.altKey) return;
    const keys = {'2': 2, '1': 1, '0': 0, 'r': 2, 'p': 1, 'n': 0};
    if (event.key in keys && items.length) { grade(items[at], keys[event.key]); }
    else if (event.key === 'j' || event.key === 'ArrowDown') { focus(at + 1); }
    else if (event.key === 'k' || event.key === 'ArrowUp') { focus(at - 1); }
    else if (event.key === 'Enter' && items.every((li) => li.dataset.grade !== '')) { goOn(); }
    else return;
    event.preventDefault();
  });

  const form = document.getElementById('add-query');
  if (form) {
    form.addEventListener('submit', (event) => {
      event.preventDefault();
      const state = document.getElementById('add-state');
      state.textContent = 'pooling (the first query may take a while: the models load)';
      post('/queries', {query: document.getElementById('new-query').value})
        .then((json) => { window.location.href = json.url; })
        .catch((error) => { state.textContent = 'not pooled: ' + error; });
    });
  }
  focus(at);
})();
